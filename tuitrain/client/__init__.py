"""The client side: a script writes a tuitrain run (`core`: init, log, finish; the faces
`tuitrain.wandb`, `tuitrain.lightning` and `tuitrain.hf` build on it), the parent side of
`tuitrain run` (`parent`), and the sampler of its process tree (`proctree`)."""
