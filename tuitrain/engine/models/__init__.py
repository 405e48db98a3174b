"""What is trained on: the image models (vision: the Fashion-MNIST CNN, the MLP,
the ResNet-18s), charlm's character transformer (gpt) and `build_model`, which picks one
by `model.name` or loads a user's factory (build)."""
