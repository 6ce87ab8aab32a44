// Umbrella header of the runtime layer.
#pragma once
#include "runtime/context.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/exec_context.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"
#include "runtime/memory.hpp"
#include "runtime/profiler.hpp"
#include "runtime/program_cache.hpp"
#include "runtime/tensor.hpp"
