"""Write tuitrain/data/fashion_mini/: a small, class-balanced, real Fashion-MNIST subset.

Reads the full set (by default Debian's /usr/share/datasets/fashion-mnist, from the
`dataset-fashion-mnist` package) and keeps a seeded stratified sample: 600 train images per
class (6,000) and 100 test images per class (1,000), in their original file order, written
as gzipped IDX files under the original names so the same reader loads them. The output is
byte-for-byte reproducible (fixed seed, gzip mtime 0).

    python scripts/make_fashion_mini.py [--source DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing the package

from tuitrain.engine.data.idx import FILE_NAMES, SYSTEM_DIR, read_split, write_idx  # noqa: E402

PER_CLASS = {"train": 600, "val": 100}
SEED = 20170825  # Fashion-MNIST's release date; any fixed value keeps the output reproducible

LICENSE = """\
The images and labels in this folder are a subset of Fashion-MNIST
(https://github.com/zalandoresearch/fashion-mnist), used under the MIT License:

The MIT License (MIT)

Copyright © 2017 Zalando SE, https://tech.zalando.com

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the “Software”), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED “AS IS”, WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""

README = """\
# fashion_mini

A small, real subset of [Fashion-MNIST](https://github.com/zalandoresearch/fashion-mnist)
shipped with tuitrain so that `--preset fashion-mini` trains on real images without a download.

- `train-*`: 6,000 images from Fashion-MNIST's training set, 600 per class;
- `t10k-*`: 1,000 images from its test set, 100 per class;
- 28×28 grayscale, gzipped IDX files under the original names, read by
  `tuitrain/engine/data/idx.py`.

Made by `scripts/make_fashion_mini.py`: a stratified sample drawn with a fixed seed
({seed}) from the full set, each class's picks kept in the original file order.
Fashion-MNIST is © 2017 Zalando SE, MIT licensed: see `LICENSE`.
"""


def stratified(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """`per_class` random indices of every class, returned sorted (original file order)."""
    picks = []
    for cls in np.unique(labels):
        members = np.flatnonzero(labels == cls)
        if len(members) < per_class:
            raise SystemExit(f"class {cls} has only {len(members)} samples, {per_class} needed")
        picks.append(rng.choice(members, size=per_class, replace=False))
    return np.sort(np.concatenate(picks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SYSTEM_DIR, help="full Fashion-MNIST")
    parser.add_argument("--out", type=Path, default=REPO / "tuitrain" / "data" / "fashion_mini")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for split, (image_stem, label_stem) in FILE_NAMES.items():
        images, labels = read_split(args.source, split)
        keep = stratified(labels.numpy(), PER_CLASS[split], rng)
        write_idx(args.out / f"{image_stem}.gz", images.numpy()[keep])
        write_idx(args.out / f"{label_stem}.gz", labels.numpy()[keep].astype(np.uint8))
        print(f"{split}: {len(keep)} of {len(labels)} samples")
    (args.out / "LICENSE").write_text(LICENSE, encoding="utf-8")
    (args.out / "README.md").write_text(README.format(seed=SEED), encoding="utf-8")
    total = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"wrote {args.out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
