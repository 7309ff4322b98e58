"""``nmt-http``: an HTTP gateway in front of the gRPC server (LibreTranslate's API, a JSON API
with every decoding option, health, and the web page in gateway/static/)."""
