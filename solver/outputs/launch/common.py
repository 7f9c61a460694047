"""What every engine's launch commands share: the process and script records (``Launch``, ``Emitted``),
the plan's numbers read once (``PlanShape``), shell quoting and the labels of nodes and GPUs.

No engine's option names here: those live in ``vllm.py``, ``sglang.py`` and ``trtllm.py``.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from shardplan.models import DType, SpecError
from shardplan.models.errors import printable
from shardplan.models.hf_config import check_model_id
from shardplan.models.presets import find_preset
from shardplan.rules.plan import Plan
from shardplan.rules.problem import resolve_profile
from shardplan.solver.placement import ExpertPlacement

ENGINE_VERSIONS = {"vllm": "vLLM 0.33.0", "sglang": "SGLang 0.5.23", "trtllm": "TensorRT-LLM 1.2"}
# The only shell expansions a script contains: the node address placeholders of ``head_address``.
_VAR = re.compile(r"^(http://)?\$NODE\d+_IP(:\d+)?$")
# Characters that would end a comment line or hide text on a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# (node, local GPU ids on it) for each node a deployment spans, in node order.
NodeGpus = list[tuple[int, list[int]]]


@dataclass(frozen=True)
class Launch:
    """One process to start: where, with which environment, which command."""

    label: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def options(self) -> list[str]:
        """Every ``--option`` (and ``-x``) token of the command, in order."""
        _, rest = _split_head(self.argv)
        return [tok.split("=", 1)[0] for tok in rest if tok.startswith("-") and not _is_number(tok)]

    def shell(self) -> str:
        """The command as one shell line per option, environment first."""
        env = " ".join(f"{k}={_quote(v)}" for k, v in self.env)
        head, rest = _split_head(self.argv)
        lines = [(env + " " if env else "") + " ".join(_quote(t) for t in head)]
        i = 0
        while i < len(rest):
            tok = rest[i]
            if tok.startswith("-") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                lines.append(f"{_quote(tok)} {_quote(rest[i + 1])}")
                i += 2
            else:
                lines.append(_quote(tok))
                i += 1
        return " \\\n    ".join(lines)


@dataclass(frozen=True)
class Emitted:
    """Everything needed to serve a plan with one engine."""

    engine: str
    version: str
    summary: str
    launches: tuple[Launch, ...]
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()  # $NODEk_IP placeholders the commands use

    def script(self) -> str:
        """A shell script: the notes as comments, each file as a here-document, each process's command."""
        out = [f"# {_comment(self.summary)}", f"# option names as in {_comment(self.version)}"]
        out += [f"# NOTE: {_comment(note)}" for note in self.notes]
        if self.heads:
            out.append("# multi-node: run each node's command on that node; NODEk_IP is the address of node k")
            for var in self.heads:
                name = var.lstrip("$")
                out.append(f': "${{{name}:?export {name}=<address of node {name[4:-3]}> on every node first}}"')
        for name, text in self.files:
            body = text.rstrip()
            end = "EOF"
            while end in body.splitlines():  # the here-document must not end inside the file
                end += "_"
            out.append(f"cat > {shlex.quote(name)} <<'{end}'\n{body}\n{end}")
        for launch in self.launches:
            out.append(f"# {_comment(launch.label)}")
            out.append(launch.shell())
        return "\n".join(out) + "\n"


# --- the plan, read once ---------------------------------------------------------------------------


@dataclass
class PlanShape:
    """The plan's numbers every engine reads, and the notes an engine collects while it reads them."""

    plan: Plan
    model: str
    dp: int
    pp: int
    tp: int
    sp: int
    attn_dp: int
    expert_tp: int
    G: int  # GPUs per stage
    ep: int
    moe: bool
    num_experts: int  # 0 for a dense model
    layers: list[int]  # layers per stage
    even_default: bool  # the stages are an even split
    batch: int
    max_len: int
    per_node: int
    kv_fp8: bool
    notes: list[str] = field(default_factory=list)
    first_gpu: int = 0  # global id of the deployment's first GPU (a disaggregated pool's offset)

    @classmethod
    def of(cls, plan: Plan, first_gpu: int = 0) -> PlanShape:
        lay, problem = plan.layout, plan.problem
        counts = [end - start for start, end in lay.stages]
        moe = problem.model.moe
        return cls(
            plan=plan,
            # The name becomes the engine's model argument: a Hugging Face id (or a bare name), never
            # a value that starts with "-" (an option) or holds shell or path syntax.
            model=_served_id(problem.model.name),
            dp=lay.dp, pp=lay.pp, tp=lay.tp, sp=lay.sp, attn_dp=lay.attn_dp, expert_tp=lay.expert_tp,
            G=lay.gpus_per_stage, ep=lay.ep, moe=problem.model.is_moe,
            num_experts=moe.num_experts if moe is not None else 0,
            layers=counts, even_default=max(counts) - min(counts) <= 1,
            batch=lay.batch, max_len=problem.workload.context,
            per_node=problem.cluster.gpus_per_node,
            kv_fp8=problem.model.kv_dtype is DType.FP8,
            first_gpu=first_gpu,
        )

    @property
    def partition(self) -> str:
        return ",".join(str(n) for n in self.layers)

    def units(self, replicas_per_unit: int) -> list[range]:
        """GPU ranges of the deployments: ``replicas_per_unit`` replicas each (GPU ids are replica-major)."""
        size = self.pp * self.G * replicas_per_unit
        first = self.first_gpu
        return [range(first + u * size, first + (u + 1) * size) for u in range(self.dp // replicas_per_unit)]

    def nodes_of(self, gpus: range) -> NodeGpus:
        """(node, local GPU ids) for each node a GPU range touches."""
        by_node: dict[int, list[int]] = {}
        for g in gpus:
            by_node.setdefault(g // self.per_node, []).append(g % self.per_node)
        return sorted(by_node.items())

    def visible(self, local: list[int]) -> tuple[tuple[str, str], ...]:
        """CUDA_VISIBLE_DEVICES when a process does not own the whole node."""
        # On AMD GPUs too: HIP honours it, and vLLM's ROCm platform names it as its device variable
        # (vllm/platforms/rocm.py, device_control_env_var), so one variable serves both vendors.
        if local == list(range(self.per_node)):
            return ()
        return (("CUDA_VISIBLE_DEVICES", ",".join(map(str, local))),)

    def check_even_nodes(self, unit: int, nodes: NodeGpus) -> None:
        sizes = {len(local) for _, local in nodes}
        if len(sizes) > 1:
            spread = " + ".join(str(len(local)) for _, local in nodes)
            self.notes.append(
                f"deployment {unit} straddles nodes unevenly ({spread} GPUs); the engine expects the same "
                "number of GPUs on every node it spans"
            )

    def placement(self) -> ExpertPlacement | None:
        """The plan's expert placement as one ``ExpertPlacement`` over every MoE layer (slots of the EP
        ranks of each layer's stage), when an engine needs it: routing that is not uniform, or
        redundant copies. Under uniform routing every balanced placement is equivalent and the
        engines' default one is used (a note says so)."""
        experts = self.plan.experts
        if experts is None or not getattr(experts, "stages", None):
            return None
        if experts.routing == "uniform" and experts.redundant_slots == 0:
            self.notes.append(
                "expert placement: uniform routing and no redundant experts, so the engine's default placement "
                "balances the load as planned and none is passed"
            )
            return None
        layers = sorted((p for st in experts.stages for p in st.placement.layers), key=lambda p: p.layer)
        # strict=False: a record with a bound missing is check_placement's to report (EXP-001), not ours
        bounds = {
            p.layer: b
            for st in experts.stages
            for p, b in zip(st.placement.layers, st.placement.lower_bounds, strict=False)
        }
        return ExpertPlacement(
            num_gpus=experts.stages[0].placement.num_gpus, slots_per_gpu=experts.slots_per_gpu,
            layers=tuple(layers), lower_bounds=tuple(bounds[p.layer] for p in layers), status=experts.status,
            solve_time_s=experts.solve_time_s,
        )

    def summary(self, engine: str) -> str:
        p = self.plan
        degrees = f"dp={self.dp} pp={self.pp} tp={self.tp} sp={self.sp} attention groups={self.attn_dp}"
        if self.moe:
            degrees += f" ep={self.ep}" + (f" expert-tp={self.expert_tp}" if self.expert_tp > 1 else "")
        return (
            f"{ENGINE_VERSIONS[engine]} launch for {self.model} on {p.problem.cluster.num_nodes} x "
            f"{self.per_node} {p.problem.cluster.gpu.name}: {degrees}, stages {self.partition} layers, "
            f"batch {self.batch}"
        )

    def weights_note(self, engine: str, quant_flag: str | None) -> list[str]:
        """A flag or a note when the plan prices weights in another format than the checkpoint's."""
        planned = self.plan.problem.model.weights_dtype
        # Only a preset's checkpoint is known: a name from a config is never opened as a path.
        preset = find_preset(self.model)
        if preset is None:
            return []
        try:
            stored = preset.load().weights_dtype
        except SpecError:
            return []
        if planned == stored:
            return []
        if planned is DType.FP8 and quant_flag:
            self.notes.append(
                f"weights planned in fp8, checkpoint in {stored.value}: {quant_flag} fp8 quantizes on load"
            )
            return [quant_flag, "fp8"]
        self.notes.append(
            f"weights planned in {planned.value}, checkpoint in {stored.value}: serve a {planned.value} checkpoint "
            f"with {ENGINE_VERSIONS[engine]}"
        )
        return []

    @property
    def token_budget(self) -> int:
        """Tokens one engine step may carry (prefill chunks and decode tokens together): the budget the
        plan's chunked prefill and its TTFT were priced with, the calibration profile's ``max_num_tokens``."""
        return resolve_profile(self.plan.problem).max_num_tokens

    @property
    def prefill_mixes(self) -> bool:
        """Whether the plan's TTFT was priced with prefill chunks mixed into decode steps (the calibration
        profile's ``prefill_mixes_with_decode``): an engine where that is opt-in must be told so."""
        return resolve_profile(self.plan.problem).prefill_mixes_with_decode

    def mem_fraction(self) -> float:
        """vLLM's --gpu-memory-utilization: the share of HBM the plan let one GPU use (its limit: the cap, or
        the profile's usable fraction), which the engine keeps everything it allocates within."""
        return _share(min(m.limit_gib / m.capacity_gib for m in self.plan.prediction.memory))

    def static_fraction(self) -> float:
        """SGLang's --mem-fraction-static: the share of HBM for weights and the KV pool, what the plan left
        them after the engine's reserve, communication buffers and activations (the tightest stage's)."""
        return _share(min(
            (m.limit_gib - m.runtime_gib - m.comm_buffers_gib - m.activations_gib) / m.capacity_gib
            for m in self.plan.prediction.memory
        ))

    def kv_free_fraction(self) -> float:
        """TensorRT-LLM's kv_cache_config.free_gpu_memory_fraction: the share of the memory free after
        weights, activations and the engine's reserve that the plan gave the KV cache (the tightest stage's)."""
        shares = []
        for m in self.plan.prediction.memory:
            used = m.weights_gib + m.runtime_gib + m.comm_buffers_gib + m.activations_gib
            shares.append((m.limit_gib - used) / max(m.capacity_gib - used, 1e-9))
        return _share(min(shares))


def _share(value: float) -> float:
    """A memory fraction for an engine flag: three decimals, within (0, 0.99] (no engine takes all of it)."""
    return round(min(max(value, 0.001), 0.99), 3)


def per_rank(batch: int, ranks: int) -> int:
    """Sequences per rank when ``batch`` is split over ``ranks`` (at least one)."""
    return max(1, math.ceil(batch / ranks))


# --- shell text and labels ------------------------------------------------------------------------


def head_address(node: int) -> str:
    """The placeholder for a node's address, expanded by the shell."""
    return f"$NODE{node}_IP"


def node_label(unit: int, node: int, k: int, nodes: NodeGpus, what: str = "deployment") -> str:
    """The comment above the command of the ``k``-th of the nodes a deployment spans."""
    return f"{what} {unit}: node {node} ({k + 1} of {len(nodes)}, GPUs {span(nodes[k][1])})"


def span(local: list[int]) -> str:
    """Local GPU ids as a range: ``0-3``, or ``5`` for one."""
    return f"{local[0]}-{local[-1]}" if len(local) > 1 else str(local[0])


# A checkpoint folder's path, as the name of a model read from its config.json (``load_config_file``): absolute,
# under ~/ or dot-relative, which no Hugging Face id is (a bare relative path reads as an id, and the
# engines look for a local folder of that name first).
_LOCAL_PATH = re.compile(r"^(?:/|~/|\.\.?(?:/|$))")


def _served_id(name: str) -> str:
    """The model argument of a launch command: ``name`` when it is a Hugging Face id or a checkpoint folder's
    path (vLLM, SGLang and TensorRT-LLM load either)."""
    if _LOCAL_PATH.match(name) and printable(name) == name:  # a folder's name, control characters escaped
        return name
    try:
        return check_model_id(name, "model")
    except SpecError as exc:
        raise SpecError("model", f"{exc.reason}; give the config an _shardplan_id to launch it") from None


def _comment(text: str) -> str:
    """``text`` on one comment line: control characters (a newline would end the comment) become spaces."""
    return _CONTROL.sub(" ", text)


def _quote(token: str) -> str:
    """Shell-quote a token; a ``$VAR`` placeholder stays expandable."""
    if _VAR.match(token):
        return f'"{token}"'
    return shlex.quote(token)


def _split_head(argv: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The entry point (program, subcommand, model) and the options after it."""
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            return list(argv[:i]), list(argv[i:])
    return list(argv), []


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False
