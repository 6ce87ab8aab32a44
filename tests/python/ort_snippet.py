# onnxruntime's Python usage as its documentation shows it (onnxruntime.ai/docs/api/python: SessionOptions,
# the available providers, names read from the session, run with an output list). The test runs this file
# twice, once as it is and once with only the import line changed to `import cldl as rt`; it gets
# MODEL (a path) and X_test (an array) from the test.
import numpy
import onnxruntime as rt

sess_options = rt.SessionOptions()
sess_options.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = rt.InferenceSession(MODEL, sess_options, providers=rt.get_available_providers())
input_name = sess.get_inputs()[0].name
label_name = sess.get_outputs()[0].name
pred_onx = sess.run([label_name], {input_name: X_test.astype(numpy.float32)})[0]
print(rt.get_device(), sess.get_providers(), pred_onx.argmax(axis=1)[:10])
