"""Model registry: the model named by `model.name`, a shipped one (models/vision.py,
models/gpt.py) or a user's factory."""

from __future__ import annotations

from torch import nn

from tuitrain.core.config import ModelConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.factory import accepted_kwargs, blame_user, load_factory
from tuitrain.engine.models.gpt import CharGPT
from tuitrain.engine.models.vision import MODELS


def build_model(
    name: str,
    num_classes: int,
    dropout: float,
    shape: tuple[int, ...],
    cfg: ModelConfig | None = None,
) -> nn.Module:
    """A registered model by name, or a user factory 'package.module:function' called with
    num_classes=N when it takes that keyword (a factory without it is called bare)."""
    if name == "gpt":
        cfg = cfg or ModelConfig()
        if len(shape) != 1:
            raise UserError(
                f"model gpt takes sequences of token ids; the data gives items of shape {shape}"
                " (use data.name = 'shakespeare' or a dataset of id sequences)."
            )
        return CharGPT(num_classes, shape[0], cfg.layers, cfg.heads, cfg.width, cfg.dropout)
    if name in MODELS:
        return MODELS[name](num_classes, dropout, shape)
    if ":" not in name:
        raise UserError(
            f"unknown model '{name}'; use one of {', '.join(MODELS)}, gpt "
            "or a factory 'package.module:function'."
        )
    factory = load_factory(name, "model.name")
    kwargs = accepted_kwargs(factory, {"num_classes": num_classes})
    call = f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    with blame_user(
        lambda error: (
            f"model.name = {name!r}: {call} raised {error}; fix the factory (it is called"
            " with the keyword num_classes when it takes it, else with nothing)."
        )
    ):
        model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise UserError(f"model factory {name} returned {type(model).__name__}, not an nn.Module.")
    if not any(p.requires_grad for p in model.parameters()):
        raise UserError(
            f"model.name = {name!r} has no parameter to train (none, or all with"
            " requires_grad=False); give the model at least one trainable parameter."
        )
    return model
