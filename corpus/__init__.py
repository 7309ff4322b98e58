"""Reading the bundled parallel corpus, with the standard library only.

Training (training/data.py), the load tester (clients/loadtest.py) and the benchmarks read
the same Bible verses through ``corpus.bible``; it imports no torch and nothing of
training/, so the clients can use it without the training stack.
"""
