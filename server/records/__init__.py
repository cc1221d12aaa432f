"""The service's own records, whatever instance keeps the workflows: which thread's source
file builds which workflow, and the runs made in the sandboxes. Both instances (`domain/`
and `n8n/`) keep them here, so neither needs the other."""

__all__: list[str] = []
