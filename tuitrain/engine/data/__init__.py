"""Where the batches come from: the batch-source contract and its helpers (sources),
Fashion-MNIST and synthetic images on the device (fashion, idx), augmentation (augment),
the DataLoader path and user datasets (loader), charlm's text (text) and `build_data`,
which picks one by `data.name` (build). Nothing here imports a task or a model."""
