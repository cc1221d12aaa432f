"""The gRPC edge: servicers that translate, interceptors for auth and errors. Nothing else
lives here; protobuf types stop at this package."""

__all__: list[str] = []
