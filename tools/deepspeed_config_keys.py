"""Regenerate ``preflight/data/deepspeed_config_keys.json``: every config key DeepSpeed reads.

A developer's tool, never run by preflight (preflight does not import DeepSpeed). Run it in a
scratch environment that has the DeepSpeed version to describe installed::

    python tools/deepspeed_config_keys.py preflight/data/deepspeed_config_keys.json

(a path, not stdout: DeepSpeed logs to stdout.)

Two kinds of section, because DeepSpeed treats unknown keys in two ways:

* Plain-dict sections (the top level, ``optimizer``, ``checkpoint``, ``activation_checkpointing``,
  ``flops_profiler``, ...) are read with ``param_dict.get(KEY, default)`` and the constants of
  ``deepspeed/runtime/constants.py`` and each feature's ``constants.py``; a key nobody reads is
  silently ignored. The keys are found by running ``DeepSpeedConfig`` (deepspeed/runtime/config.py)
  on dicts that record every key looked up, so the list is what the code really reads.
* Sections parsed by a ``DeepSpeedConfigModel`` (deepspeed/runtime/config_utils.py:
  ``model_config = ConfigDict(extra="forbid", ...)``) reject an unknown key with a pydantic
  validation error at ``deepspeed.initialize``. Their keys are the models' fields and aliases;
  which top-level key feeds which model is listed in ``MODEL_SECTIONS`` with the line that does it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import deepspeed
from deepspeed.runtime import config as ds_config
from deepspeed.runtime.config_utils import DeepSpeedConfigModel

# Top-level key -> the model that parses it, and where (DeepSpeed 0.19.8 line numbers).
MODEL_SECTIONS: dict[str, tuple[str, str]] = {
    "zero_optimization": ("deepspeed.runtime.zero.config.DeepSpeedZeroConfig",
                          "runtime/zero/config.py:68 get_zero_config"),
    "bf16": ("deepspeed.runtime.precision_config.DeepSpeedBF16Config",
             "runtime/precision_config.py get_bfloat16_config"),
    "bfloat16": ("deepspeed.runtime.precision_config.DeepSpeedBF16Config",
                 "runtime/precision_config.py get_bfloat16_config (BFLOAT16_OLD)"),
    "fp16": ("deepspeed.runtime.precision_config.DeepSpeedFP16Config",
             "runtime/precision_config.py get_float16_config"),
    "comms_logger": ("deepspeed.comm.config.CommsLoggerConfig", "comm/config.py DeepSpeedCommsConfig"),
    "tensorboard": ("deepspeed.monitor.config.TensorBoardConfig", "monitor/config.py:13 get_monitor_config"),
    "wandb": ("deepspeed.monitor.config.WandbConfig", "monitor/config.py:13 get_monitor_config"),
    "csv_monitor": ("deepspeed.monitor.config.CSVConfig", "monitor/config.py:13 get_monitor_config"),
    "comet": ("deepspeed.monitor.config.CometConfig", "monitor/config.py:13 get_monitor_config"),
    "compile": ("deepspeed.compile.config.CompileConfig", "runtime/config.py:584"),
    "tensor_parallel": ("deepspeed.runtime.tensor_parallel.config.TPTrainingConfig",
                        "runtime/tensor_parallel/config.py:148 get_tensor_parallel_config"),
    "timers.throughput": ("deepspeed.utils.config.DeepSpeedThroughputTimerConfig", "utils/config.py get_timers_config"),
    "hybrid_engine": ("deepspeed.runtime.config.HybridEngineConfig", "runtime/config.py:369 get_hybrid_engine_config"),
    "weight_quantization": ("deepspeed.inference.config.WeightQuantConfig", "runtime/config.py:582"),
}

# Sections whose contents go elsewhere unchecked: optimizer/scheduler constructor kwargs
# (runtime/config.py:295, :332), pipeline overrides copied key by key (runtime/config.py:283),
# DataStates and AutoEP options handed to their own parsers.
FREE_FORM = ("optimizer.params", "scheduler.params", "pipeline", "datastates_ckpt", "expert_parallel",
             "autotuning.model_info", "data_efficiency")

# Read outside DeepSpeedConfig: deepspeed/__init__.py:543-550 (mesh device, AutoTP) and
# runtime/config.py:465 (sequence-parallel world size, reached only once torch.distributed is up).
EXTRA_TOP_LEVEL = ("sequence_parallel_size", "data_parallel_size")

MINIMAL = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}


class _Keys:
    """``param_dict.keys()`` that records ``KEY in param_dict.keys()``."""

    def __init__(self, owner: Recorder) -> None:
        self.owner = owner

    def __contains__(self, key: object) -> bool:
        self.owner.note(key)
        return dict.__contains__(self.owner, key)

    def __iter__(self) -> Iterator[Any]:
        return iter(dict.keys(self.owner))

    def __len__(self) -> int:
        return dict.__len__(self.owner)


class Recorder(dict[str, Any]):
    """A dict that logs every key looked up in it, under its path in the config."""

    def __init__(self, path: str, log: set[tuple[str, str]], *args: Any) -> None:
        super().__init__(*args)
        self.path = path
        self.log = log

    def note(self, key: object) -> None:
        if isinstance(key, str):
            self.log.add((self.path, key))

    def get(self, key: Any, default: Any = None) -> Any:
        self.note(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.note(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.note(key)
        return super().__contains__(key)

    def keys(self) -> _Keys:  # type: ignore[override]  # DeepSpeed asks `KEY in d.keys()`: a view that records
        return _Keys(self)

    def __copy__(self) -> Recorder:
        return Recorder(self.path, self.log, self)


def read_keys(config: dict[str, Any]) -> set[tuple[str, str]] | None:
    """(path, key) pairs DeepSpeedConfig looks up for ``config``; None when it refuses it."""
    log: set[tuple[str, str]] = set()

    def wrap(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return Recorder(path, log, {k: wrap(v, f"{path}.{k}" if path else k) for k, v in value.items()})
        return value

    try:
        ds_config.DeepSpeedConfig(wrap(config, ""))
    except Exception:  # noqa: BLE001 - a section that must not be a dict: that try tells nothing
        return None
    return log


def dict_sections() -> dict[str, set[str]]:
    """Keys of the plain-dict sections, found by offering a recording dict at each key read."""
    found: dict[str, set[str]] = {}
    first = read_keys(dict(MINIMAL))
    assert first is not None
    pending = [(path, key) for path, key in first]
    seen: set[str] = set()
    while pending:
        path, key = pending.pop()
        found.setdefault(path, set()).add(key)
        full = f"{path}.{key}" if path else key
        if full in seen or full in MODEL_SECTIONS or full in FREE_FORM or full.count(".") >= 3:
            continue
        seen.add(full)
        trial: dict[str, Any] = dict(MINIMAL)
        cursor = trial
        for part in full.split(".")[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[full.split(".")[-1]] = {}
        log = read_keys(trial)
        if log:
            pending.extend((p, k) for p, k in log if p == full)
    found.setdefault("", set()).update(EXTRA_TOP_LEVEL)
    found[""] -= set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)  # read only to refuse them: see "removed"
    for key in (*MODEL_SECTIONS, *FREE_FORM):  # read only when a sibling is set (optimizer.params needs type)
        parent, _, leaf = key.rpartition(".")
        found.setdefault(parent, set()).add(leaf)
    return found


def _model(dotted: str) -> type[DeepSpeedConfigModel]:
    module, _, name = dotted.rpartition(".")
    return getattr(sys.modules[module] if module in sys.modules else __import__(module, fromlist=[name]), name)


def _nested_model(annotation: Any) -> type[DeepSpeedConfigModel] | None:
    """The config model inside ``Optional[Model]`` / ``Model``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, DeepSpeedConfigModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def model_sections(path: str, model: type[DeepSpeedConfigModel], source: str, out: dict[str, Any]) -> None:
    """Fields, aliases and deprecated fields of ``model`` (and of the models it nests)."""
    keys: list[str] = []
    aliases: dict[str, str] = {}
    deprecated: dict[str, str] = {}
    for name, field in model.model_fields.items():
        keys.append(name)
        if field.alias and field.alias != name:
            keys.append(field.alias)
            aliases[field.alias] = name
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("deprecated"):
            deprecated[name] = str(extra.get("new_param", ""))
        nested = _nested_model(field.annotation)
        if nested is not None:
            model_sections(f"{path}.{name}", nested, f"{model.__module__}.{model.__name__}.{name}", out)
    out[path] = {"unknown": "rejected", "model": f"{model.__module__}.{model.__name__}", "source": source,
                 "keys": sorted(set(keys)), "aliases": aliases, "deprecated": deprecated}


def main() -> int:
    sections: dict[str, Any] = {}
    for path, keys in sorted(dict_sections().items()):
        sections[path] = {"unknown": "ignored", "source": "runtime/config.py DeepSpeedConfig (keys read)",
                          "keys": sorted(keys)}
    for path, (dotted, source) in MODEL_SECTIONS.items():
        model_sections(path, _model(dotted), source, sections)
    removed = {key: message for key, message in ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS.items()}
    zero_removed = ds_config._REMOVED_ZERO_CONFIG_KEYS
    removed.update({f"zero_optimization.{key}": message for key, message in zero_removed.items()})
    data = {
        "deepspeed_version": deepspeed.__version__,
        "generated_by": "tools/deepspeed_config_keys.py",
        "sources": [
            "deepspeed/runtime/config.py (DeepSpeedConfig, _reject_removed_config_keys)",
            "deepspeed/runtime/constants.py",
            "deepspeed/runtime/config_utils.py (DeepSpeedConfigModel: extra='forbid', 'auto' values dropped)",
            "deepspeed/runtime/zero/config.py, deepspeed/runtime/zero/offload_config.py",
            "deepspeed/runtime/precision_config.py",
            "deepspeed/monitor/config.py, deepspeed/comm/config.py, deepspeed/compile/config.py",
            "deepspeed/runtime/tensor_parallel/config.py, deepspeed/utils/config.py",
            "deepspeed/runtime/activation_checkpointing/config.py, deepspeed/profiling/config.py",
            "deepspeed/autotuning/config.py, deepspeed/runtime/swap_tensor/aio_config.py",
            "deepspeed/runtime/model_checkpointing/config.py, deepspeed/__init__.py:543-550",
        ],
        "free_form": list(FREE_FORM),
        "removed": removed,
        "sections": dict(sorted(sections.items())),
    }
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(data, out, indent=1)
        out.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
