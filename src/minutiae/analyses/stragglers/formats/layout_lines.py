"""The parallel layout a training log prints when the job starts (pure: one line in, sizes out).

Megatron-LM, rank 0, ``validate_args`` (``megatron/training/arguments.py``); the field list grew
over the versions and a missing ``', '`` glues two fields (``sizes: Nonetensor-...``)::

    using world size: 4, data-parallel-size: 2, tensor-model-parallel size: 2, pipeline-model-parallel size: 1
    using world size: 2, data-parallel size: 1, context-parallel size: 1, hierarchical context-parallel
        sizes: Nonetensor-model-parallel size: 1, encoder-tensor-model-parallel size: 0,
        pipeline-model-parallel size: 2, encoder-pipeline-model-parallel size: 0

and its argument dump after it (``_print_args``: ``  name ..... value``), which alone names
expert parallelism and the rank order (``--use-tp-pp-dp-mapping``)::

    pipeline_model_parallel_size .................... 2

torchtitan, rank 0 (``ParallelDims.build_mesh``, ``torchtitan/distributed/parallel_dims.py``:
``Building {len(dims)}-D device mesh with {names}, {dims}``; only the dimensions > 1, outermost
first)::

    Building 3-D device mesh with ['dp_replicate', 'dp_shard', 'cp'], [2, 1, 2]

Every ``dp*`` dimension of a mesh (``dp_replicate``, ``dp_shard``, ``dp_shard_mod_ep``, ...)
is data parallelism; a mesh naming any other dimension is not read (nothing guessed).
"""

from __future__ import annotations

import re

__all__ = ["read"]

_MEGATRON = re.compile(r"using world size: (\d{1,7}), data-parallel[- ]size: (\d{1,7})")
_FIELDS = {
    "tp": re.compile(r"(?<!encoder-)tensor-model-parallel size: (\d{1,7})"),
    "pp": re.compile(r"(?<!encoder-)pipeline-model-parallel size: (\d{1,7})"),
    "cp": re.compile(r"(?<![\w-])context-parallel size: (\d{1,7})"),
}
_ARG = re.compile(r"^\s*(tensor_model_parallel_size|pipeline_model_parallel_size|"
                  r"data_parallel_size|context_parallel_size|expert_model_parallel_size|"
                  r"world_size|use_tp_pp_dp_mapping) \.{3,} (\S{1,16})\s*$")
_ARG_KEY = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
            "data_parallel_size": "dp", "context_parallel_size": "cp",
            "expert_model_parallel_size": "ep", "world_size": "world"}
_MESH = re.compile(r"Building (\d)-D device mesh with \[([^\]]{0,200})\], \[([\d, ]{0,100})\]")

#: words one of which every line above contains (``LineReader.signs``)
SIGNS = ("using world size", "_parallel_size ", "world_size ", "use_tp_pp_dp_mapping",
         "device mesh with")


def read(line: str) -> dict[str, str] | None:
    """The sizes (``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``world``) and rank ``order`` one
    line states, or None for any other line."""
    m = _MEGATRON.search(line)
    if m is not None:
        out = {"world": m[1], "dp": m[2]}
        for key, pattern in _FIELDS.items():
            f = pattern.search(line, m.end())
            if f is not None:
                out[key] = f[1]
        return out
    m = _ARG.match(line)
    if m is not None:
        if m[1] == "use_tp_pp_dp_mapping":
            return {"order": "megatron-tp-pp-dp" if m[2] == "True" else "megatron"}
        return {_ARG_KEY[m[1]]: m[2]} if m[2].isdecimal() else None
    m = _MESH.search(line)
    return _mesh(m) if m is not None else None


def _mesh(m: re.Match[str]) -> dict[str, str] | None:
    names = [n.strip().strip("'\"") for n in m[2].split(",") if n.strip()]
    dims = [d.strip() for d in m[3].split(",") if d.strip()]
    if len(names) != len(dims) or len(names) != int(m[1]):
        return None
    sizes = {"tp": 1, "pp": 1, "cp": 1, "dp": 1}
    for name, dim in zip(names, dims, strict=True):
        key = "dp" if name.startswith("dp") else name
        if key not in sizes:
            return None
        sizes[key] *= int(dim)
    world = sizes["tp"] * sizes["pp"] * sizes["cp"] * sizes["dp"]
    return {**{k: str(v) for k, v in sizes.items()}, "world": str(world), "order": "torchtitan"}
