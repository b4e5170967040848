"""Recording the step and the batch where a library runs the training loop: a Hugging Face
`Trainer` (transformers.py) or a Lightning `Trainer` (lightning.py), as watch() records them
for a plain loop. Each module imports its library; this package imports none of them, so
cudadiag depends on no such library (`pip install cudadiag[transformers]`, `[lightning]`).

batch/fetched.py follows the batches a DataLoader hands out until the library runs them;
models.py reads the model's facts the advice needs; attach.py adds the callbacks to every
Trainer a kernel creates.
"""
