"""ModelConfig: the HF config.json of a DeepSeek-V4 checkpoint, and what the V4
architecture (and its FP8/FP4 checkpoint format) allows."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import MISSING, dataclass, field, fields

ALLOWED_RATIOS = (0, 4, 128)

_DEFAULT_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                  "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
_DEFAULT_YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 16,
                 "original_max_position_embeddings": 65536, "type": "yarn"}


class ConfigError(ValueError):
    """A config the V4 architecture does not allow; the message is one line naming
    the field, its value and the allowed range."""


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    sliding_window: int
    compress_ratios: list
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_hash_layers: int
    n_shared_experts: int = 1
    num_key_value_heads: int = 1
    num_nextn_predict_layers: int = 1
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_scaling: dict = field(default_factory=lambda: dict(_DEFAULT_YARN))
    max_position_embeddings: int = 1048576
    routed_scaling_factor: float = 1.5
    swiglu_limit: float = 10.0
    scoring_func: str = "sqrtsoftplus"
    topk_method: str = "noaux_tc"
    norm_topk_prob: bool = True
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    bos_token_id: int = 0
    eos_token_id: int = 1
    expert_dtype: str = "fp4"
    model_type: str = "deepseek_v4"
    quantization_config: dict = field(default_factory=lambda: copy.deepcopy(_DEFAULT_QUANT))
    # Every other key of config.json, written back unchanged by to_dict().
    extra: dict = field(default_factory=dict)

    # ---- construction --------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        if not isinstance(d, dict):
            raise ConfigError("config: top-level value must be a JSON object")
        names = {f.name for f in fields(cls)} - {"extra"}
        kwargs, extra = {}, {}
        for k, v in d.items():
            (kwargs if k in names else extra)[k] = v
        missing = [f.name for f in fields(cls) if f.name != "extra" and f.name not in kwargs
                   and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise ConfigError(f"config: field '{missing[0]}' is missing")
        if isinstance(kwargs.get("eos_token_id"), list) and kwargs["eos_token_id"]:
            kwargs["eos_token_id"] = kwargs["eos_token_id"][0]
        return cls(**copy.deepcopy(kwargs), extra=copy.deepcopy(extra))

    @classmethod
    def from_json_file(cls, path: str) -> "ModelConfig":
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: cannot read config: {e}") from None
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        d = {k: copy.deepcopy(v) for k, v in self.extra.items()}
        for f in fields(self):
            if f.name != "extra":
                d[f.name] = copy.deepcopy(getattr(self, f.name))
        d.setdefault("architectures", ["DeepseekV4ForCausalLM"])
        return dict(sorted(d.items()))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    # ---- derived -------------------------------------------------------------------
    @property
    def num_layers_with_mtp(self) -> int:
        return self.num_hidden_layers + self.num_nextn_predict_layers

    def compress_ratio(self, layer: int) -> int:
        return self.compress_ratios[layer]

    @property
    def hc_mix(self) -> int:
        """Rows of hc_attn_fn/hc_ffn_fn: pre (hc) + post (hc) + comb (hc x hc)."""
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def nope_dim(self) -> int:
        return self.head_dim - self.qk_rope_head_dim

    # ---- validation ----------------------------------------------------------------
    def validate(self) -> "ModelConfig":
        """Raises ConfigError (one line: field, value, allowed range) or returns self."""

        def bad(name, value, allowed):
            raise ConfigError(f"config: field '{name}' = {value!r}: {allowed}")

        def integer(name, lo, hi=None):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None
                                                                          and v > hi):
                rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
                bad(name, v, f"must be an integer {rng}")
            return v

        def real(name, lo_exclusive=0.0, hi=None):
            v = getattr(self, name)
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or v <= lo_exclusive or (hi is not None and v > hi)):
                rng = f"({lo_exclusive}, {hi}]" if hi is not None else f"> {lo_exclusive}"
                bad(name, v, f"must be a finite number {rng}")
            return v

        def equals(name, allowed):
            v = getattr(self, name)
            if v not in allowed:
                bad(name, v, "must be " + " or ".join(repr(a) for a in allowed))

        equals("model_type", ("deepseek_v4",))
        for n in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_lora_rank", "o_groups",
                  "sliding_window", "n_routed_experts", "num_experts_per_tok",
                  "moe_intermediate_size", "max_position_embeddings"):
            integer(n, 1)
        integer("num_hash_layers", 0, self.num_hidden_layers)
        integer("num_experts_per_tok", 1, self.n_routed_experts)
        integer("n_shared_experts", 1, 1)
        integer("num_key_value_heads", 1, 1)
        integer("num_nextn_predict_layers", 0, 1)
        integer("hc_mult", 1, 16)
        integer("hc_sinkhorn_iters", 1, 100)
        integer("index_n_heads", 0)
        integer("index_head_dim", 0)
        integer("index_topk", 0)
        integer("bos_token_id", 0, self.vocab_size - 1)
        integer("eos_token_id", 0, self.vocab_size - 1)
        real("hc_eps", 0.0, 1e-2)
        real("rms_norm_eps", 0.0, 1e-2)
        real("rope_theta")
        real("compress_rope_theta")
        real("routed_scaling_factor")
        real("swiglu_limit")

        # Every FP8/FP4 GEMM quantizes its activation in 1x128 blocks along K, and FP8
        # weights carry 128x128 block scales: those inputs must be whole blocks.
        for n in ("hidden_size", "q_lora_rank", "moe_intermediate_size"):
            if getattr(self, n) % 128:
                bad(n, getattr(self, n), "must be a multiple of 128 (FP8 activation blocks)")
        if (self.o_groups * self.o_lora_rank) % 128:
            bad("o_lora_rank", self.o_lora_rank,
                f"o_groups * o_lora_rank must be a multiple of 128 (o_groups = {self.o_groups})")
        if self.qk_rope_head_dim % 2:
            bad("qk_rope_head_dim", self.qk_rope_head_dim, "must be even (RoPE pairs)")
        if self.head_dim <= self.qk_rope_head_dim:
            bad("head_dim", self.head_dim,
                f"must exceed qk_rope_head_dim ({self.qk_rope_head_dim})")
        if self.nope_dim % 64:
            bad("head_dim", self.head_dim,
                f"head_dim - qk_rope_head_dim must be a multiple of 64 (KV FP8 QAT blocks; "
                f"qk_rope_head_dim = {self.qk_rope_head_dim})")
        if self.num_attention_heads % self.o_groups:
            bad("num_attention_heads", self.num_attention_heads,
                f"must be divisible by o_groups ({self.o_groups})")

        if not isinstance(self.compress_ratios, list):
            bad("compress_ratios", self.compress_ratios, "must be a list")
        if len(self.compress_ratios) != self.num_layers_with_mtp:
            bad("compress_ratios", f"<{len(self.compress_ratios)} entries>",
                f"must have num_hidden_layers + num_nextn_predict_layers = "
                f"{self.num_layers_with_mtp} entries (the last ones for the MTP layers)")
        for i, r in enumerate(self.compress_ratios):
            if r not in ALLOWED_RATIOS or isinstance(r, bool):
                bad(f"compress_ratios[{i}]", r, "must be 0 (window), 4 (CSA) or 128 (HCA)")
            if i >= self.num_hidden_layers and r != 0:
                bad(f"compress_ratios[{i}]", r, "must be 0: the MTP layer is window-only")
        if 4 in self.compress_ratios:
            integer("index_topk", 1)
            integer("index_n_heads", 1)
            d = self.index_head_dim
            if d & (d - 1) or d < 32 or d <= self.qk_rope_head_dim:
                bad("index_head_dim", d,
                    f"must be a power of two >= 32 (Hadamard, FP4 blocks) and exceed "
                    f"qk_rope_head_dim ({self.qk_rope_head_dim})")

        equals("scoring_func", ("sqrtsoftplus",))
        equals("topk_method", ("noaux_tc",))
        equals("norm_topk_prob", (True,))
        equals("hidden_act", ("silu",))
        equals("tie_word_embeddings", (False,))
        equals("expert_dtype", ("fp4",))

        rs = self.rope_scaling
        if not isinstance(rs, dict):
            bad("rope_scaling", rs, "must be an object with the YaRN parameters")
        if rs.get("type", rs.get("rope_type")) != "yarn":
            bad("rope_scaling.type", rs.get("type"), "must be 'yarn'")
        for k, lo in (("factor", 1.0), ("beta_fast", 0.0), ("beta_slow", 0.0),
                      ("original_max_position_embeddings", 0.0)):
            v = rs.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= lo or (
                    lo == 0.0 and v == 0) or not math.isfinite(v):
                bad(f"rope_scaling.{k}", v, f"must be a number >= {lo}" + (
                    "" if lo else " and non-zero"))
        if not rs["beta_fast"] > rs["beta_slow"]:
            bad("rope_scaling.beta_fast", rs["beta_fast"],
                f"must exceed beta_slow ({rs['beta_slow']})")

        q = self.quantization_config
        if not isinstance(q, dict):
            bad("quantization_config", q, "must be an object")
        for k, want in (("quant_method", "fp8"), ("fmt", "e4m3"), ("scale_fmt", "ue8m0")):
            if q.get(k) != want:
                bad(f"quantization_config.{k}", q.get(k), f"must be {want!r}")
        if q.get("weight_block_size") != [128, 128]:
            bad("quantization_config.weight_block_size", q.get("weight_block_size"),
                "must be [128, 128]")
        if q.get("activation_scheme", "dynamic") != "dynamic":
            bad("quantization_config.activation_scheme", q.get("activation_scheme"),
                "must be 'dynamic'")
        return self
