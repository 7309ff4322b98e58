"""The torch-free decoding engine: what export, server, verification and benchmarks share.

``contract`` (graph names and shapes), ``package`` (the model package and its manifest),
``defaults`` (special ids, length penalty, output-length rule), ``runtime`` (onnxruntime
sessions and the device they run on), ``decoding`` (greedy and beam search, batched
continuously). Imports neither torch nor onnx, and nothing from training, export or server.
"""
