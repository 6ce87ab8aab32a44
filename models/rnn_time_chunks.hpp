// LSTM / GRU training in time chunks: the pipelined (wavefront) schedule of recurrent layers that span devices.
//
// A training graph holds per recurrent layer a forward (LSTMTrain / GRUTrain, which saves its states) and a
// backward (RNNGrad, through all the steps from the last). Whole, layer l + 1's forward waits for all of layer l's
// steps and layer l's backward for all of layer l + 1's, so layers on different devices take turns. The typed pass
// "rnn-time-chunks" cuts every such pair whose RNNGrad carries kTimeChunksAttr = C > 1 into C chunks of steps
// (time_chunk_sizes): the forward chunk c starts from the states chunk c - 1 ended with (its Y_h / Y_c as
// initial_h / initial_c), the backward chunk c runs from chunk c + 1's state gradients (its d initial_h / _c as
// dY_h / dY_c) over chunk c's saved states, and the weight gradients are the Sum of the chunks'. That is exact:
// only the order of the weight gradients' sums changes. Then, between layers, a Split of (a row-keeping view of:
// Reshape, Squeeze, Unsqueeze, Identity) the Concat of the layer below's chunks becomes those chunks: layer l + 1's
// forward chunk c reads layer l's chunk c and, in the backward, layer l's chunk c reads layer l + 1's dX of chunk c.
// Placed on devices (kDeviceAttr, models/passes.hpp), the executor's events then make the forward a wavefront and the
// backward a wavefront in reverse: layer l + 1's backward of chunk c runs beside layer l's of chunk c + 1.
//
// Supported: forward-direction layers of layout 0 (time-major: a chunk is contiguous) without sequence_lens whose
// saved states only their RNNGrad reads; any other layer runs whole, logged with the reason.
#pragma once
#include <cstdint>
#include <vector>

#include "models/graph.hpp"

namespace cldl::graph {

// Int attribute of an LSTM / GRU node (kept by its training forms and copied to its RNNGrad): the time chunks.
inline constexpr const char* kTimeChunksAttr = "_cldl_time_chunks";

// `steps` steps in min(chunks, steps) chunks (at least 1), as equal as possible, the first ones larger.
std::vector<int64_t> time_chunk_sizes(int64_t steps, int64_t chunks);

// The pass (registered as "rnn-time-chunks", typed): returns the pairs chunked plus the Splits joined.
size_t chunk_rnn_training(Graph& g);

}  // namespace cldl::graph
