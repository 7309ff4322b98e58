"""Documents to translate and their translations put back: HTML, Markdown, subtitles, Word and
OpenDocument files, plain text. Torch-free and model-free; the gateway (/translate_file) and
nmt-translate share it, and both translate through the gRPC server."""
