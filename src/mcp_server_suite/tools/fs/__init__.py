"""The file tools: `sandbox_fs_read` and `sandbox_fs_list`, one module per layer.

Importing the package loads nothing heavy: start-up needs only `root` (the sandbox directory,
opened once), and each tool's implementation is imported on its first call.
"""

__all__: list[str] = []
