"""cudadiag: diagnose PyTorch CUDA errors from inside a notebook."""
