"""The files of a saved :class:`~fedmc.model.FactorModel`: ``model.npz`` and ``model.json``.

``model.npz`` holds the arrays (written and read with ``allow_pickle=False``, so loading runs
no code): ``V`` (float64, items x width), ``item_ids`` (integers or text) and, only when user
factors were asked for, ``U``, ``user_ids``, ``rated_ptr`` and ``rated_items`` (each user's
training items). ``model.json`` holds the rest: format and fedmc version, algorithm and
settings, the factor layout, the normalizer, the rating range, the data set's name, and the
shape and dtype of every array. Both are written atomically (temporary file, then rename).

Reading checks everything before a model is built: both files present and parseable, the
format and its version, every array's presence, dtype and shape (against each other and the
metadata), finite factors, the constraint columns of the bias layout, index arrays inside
their ranges, and the settings validating as the algorithm's ``Config``. Any failure is a
:class:`~fedmc.errors.DataError` naming the file, in one line.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from fedmc.core.factors import RANK_BOOST
from fedmc.core.scale import Normalizer
from fedmc.errors import DataError, FedMCError
from fedmc.files import strict_json, write_atomic

FORMAT = "fedmc-factor-model"
FORMAT_VERSION = 1
ARRAYS = "model.npz"
METADATA = "model.json"
_USER_ARRAYS = ("U", "user_ids", "rated_ptr", "rated_items")
_NORMALIZE_KINDS = ("none", "center", "zscore", "public")


def write(model: Any, folder: Path) -> Path:
    """Write ``model`` into ``folder`` (created if needed); returns the ``model.npz`` path."""
    arrays = {"V": model.V, "item_ids": model.item_ids}
    if model.rank_boost is not None:
        arrays[RANK_BOOST] = model.rank_boost
    if model.U is not None:
        arrays.update(U=model.U, user_ids=model.user_ids, rated_ptr=model.rated_ptr,
                      rated_items=model.rated_items)
    layout = model.layout
    norm = model.normalizer
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fedmc_version": model.fedmc_version,
        "algorithm": model.algorithm,
        "params": model.params,
        "layout": {"rank": layout.rank, "biases": layout.biases,
                   "width": layout.width_for(len(model.item_ids)), "item_item": layout.item_item,
                   "item_bias_column": layout.rank + 1 if layout.biases else None},
        "normalizer": {"kind": norm.kind, "mean": norm.mean, "scale": norm.scale},
        "value_range": [v if math.isfinite(v) else None for v in model.value_range],
        "dataset": model.dataset,
        "user_factors": model.U is not None,
        "private": model.private,
        "arrays": {k: {"shape": list(a.shape), "dtype": a.dtype.str} for k, a in arrays.items()},
    }
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / ARRAYS, lambda fh: np.savez(fh, allow_pickle=False, **arrays))
    write_atomic(folder / METADATA, strict_json(meta))
    return folder / ARRAYS


def read(path: Path) -> dict[str, Any]:
    """The checked fields of the model saved at ``path`` (a folder, or one of its files)."""
    npz_path, meta_path = _files(path)
    meta = _metadata(meta_path)
    arrays = _arrays(npz_path, meta)
    fields = {
        "algorithm": meta["algorithm"],
        "params": meta["params"],
        "normalizer": _normalizer(meta_path, meta.get("normalizer")),
        "value_range": _value_range(meta_path, meta.get("value_range")),
        "dataset": str(meta.get("dataset", "")),
        "fedmc_version": str(meta.get("fedmc_version", "")),
        "private": meta.get("private") is True,
        **arrays,
    }
    _check_layout(meta_path, fields)
    return fields


def _files(path: Path) -> tuple[Path, Path]:
    if path.is_dir():
        folder = path
    elif path.name in (ARRAYS, METADATA):
        folder = path.parent
    elif not path.exists():
        raise DataError("no such run folder or model file", path)
    else:
        raise DataError(f"expected a run folder or its {ARRAYS}", path)
    for name in (ARRAYS, METADATA):
        if not (folder / name).is_file():
            raise DataError(f"no {name} here: not the folder of a factor-model run (fedmc run "
                            "--out DIR writes one)", folder)
    return folder / ARRAYS, folder / METADATA


def _metadata(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read the model metadata: {exc}", path) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"not a {FORMAT} file", path)
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(f"model format version {version!r} (made by fedmc "
                        f"{meta.get('fedmc_version', '?')}); this fedmc reads version "
                        f"{FORMAT_VERSION}", path)
    for key, kind in (("algorithm", str), ("params", dict), ("arrays", dict)):
        if not isinstance(meta.get(key), kind):
            raise DataError(f"the metadata lacks a valid {key!r}", path)
    return meta


def _arrays(path: Path, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of ``model.npz``, each as the metadata describes it."""
    expected = meta["arrays"]
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read the model arrays: {exc}", path) from None
    if set(arrays) != set(expected):
        raise DataError(f"holds arrays {sorted(arrays)}, its {METADATA} lists "
                        f"{sorted(expected)}", path)
    wanted = ({"V", "item_ids"} | (set(_USER_ARRAYS) if "U" in arrays else set())
              | ({RANK_BOOST} if RANK_BOOST in arrays else set()))
    if set(arrays) != wanted:
        raise DataError(f"expected the arrays {sorted(wanted)}, found {sorted(arrays)}", path)
    for name, array in arrays.items():
        spec = expected[name]
        if not isinstance(spec, dict) or list(array.shape) != spec.get("shape") or (
                array.dtype.str != spec.get("dtype")):
            raise DataError(f"array {name} is {array.dtype.str} {list(array.shape)}, its "
                            f"{METADATA} says {spec}", path)
    _check_arrays(path, arrays)
    return arrays


def _check_arrays(path: Path, a: dict[str, np.ndarray]) -> None:
    """Dtypes, shapes and ranges of the arrays among themselves."""
    V = a["V"]
    if V.dtype != np.float64 or V.ndim != 2 or not np.all(np.isfinite(V)):
        raise DataError("V must be a finite float64 matrix", path)
    _check_ids(path, a["item_ids"], len(V), "item")
    boost = a.get(RANK_BOOST)
    if boost is not None and (boost.dtype != np.float64 or boost.shape != (len(V),)
                              or not np.all(np.isfinite(boost))):
        raise DataError(f"{RANK_BOOST} must be {len(V)} finite float64 numbers, one an item",
                        path)
    if "U" not in a:
        return
    U, ptr, rated = a["U"], a["rated_ptr"], a["rated_items"]
    if U.dtype != np.float64 or U.ndim != 2 or U.shape[1] != V.shape[1] or not np.all(
            np.isfinite(U)):
        raise DataError(f"U must be a finite float64 matrix with {V.shape[1]} columns", path)
    _check_ids(path, a["user_ids"], len(U), "user")
    if (ptr.dtype != np.int64 or rated.dtype != np.int32 or ptr.shape != (len(U) + 1,)
            or rated.ndim != 1 or ptr[0] != 0 or ptr[-1] != len(rated)
            or np.any(np.diff(ptr) < 0)):
        raise DataError("rated_ptr/rated_items are not an int64/int32 CSR over the users", path)
    if len(rated) and (rated.min() < 0 or rated.max() >= len(V)):
        raise DataError("rated_items holds an item index outside the items", path)


def _check_ids(path: Path, ids: np.ndarray, n: int, what: str) -> None:
    if ids.shape != (n,) or ids.dtype.kind not in "iuU":
        raise DataError(f"{what}_ids must be {n} integers or strings", path)
    if len(np.unique(ids)) != n:
        raise DataError(f"{what}_ids are not distinct", path)


def _normalizer(path: Path, spec: Any) -> Normalizer:
    if not isinstance(spec, dict) or spec.get("kind") not in _NORMALIZE_KINDS:
        raise DataError("the metadata lacks a valid normalizer", path)
    mean, scale = spec.get("mean"), spec.get("scale")
    if not (isinstance(mean, int | float) and isinstance(scale, int | float)
            and math.isfinite(mean) and math.isfinite(scale) and scale > 0):
        raise DataError("the normalizer needs a finite mean and a positive scale", path)
    return Normalizer(spec["kind"], float(mean), float(scale))


def _value_range(path: Path, spec: Any) -> tuple[float, float]:
    if not isinstance(spec, list) or len(spec) != 2 or not all(
            v is None or isinstance(v, int | float) for v in spec):
        raise DataError("the metadata lacks a valid value_range", path)
    lo = -math.inf if spec[0] is None else float(spec[0])
    hi = math.inf if spec[1] is None else float(spec[1])
    if not lo <= hi:
        raise DataError(f"value_range [{lo}, {hi}] is empty", path)
    return lo, hi


def _check_layout(path: Path, fields: dict[str, Any]) -> None:
    """The settings validate, and the factors have their layout's width and fixed columns."""
    from fedmc.algorithms.registry import spec

    try:
        cfg = spec(fields["algorithm"]).Config(**fields["params"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "params"
        raise DataError(f"the saved settings do not validate: {where}: {first['msg']}",
                        path) from None
    except FedMCError as exc:
        raise DataError(str(exc), path) from None
    layout = getattr(cfg, "layout", None)
    if layout is None:
        raise DataError(f"{fields['algorithm']} is not a factor model", path)
    width = layout.width_for(fields["V"].shape[0])
    if fields["V"].shape[1] != width:
        needs = ("an item-item model" if layout.item_item else f"rank {layout.rank} "
                 f"{'with' if layout.biases else 'without'} biases")
        raise DataError(f"V has {fields['V'].shape[1]} columns, {needs} needs {width}", path)
    if layout.biases:
        fixed = [("V", layout.ones_col_v), ("U", layout.ones_col_u)]
        for name, col in fixed:
            if fields.get(name) is not None and not np.all(fields[name][:, col] == 1.0):
                raise DataError(f"column {col} of {name} must be all ones (the bias layout)",
                                path)
