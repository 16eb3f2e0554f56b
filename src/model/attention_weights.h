// Internal to the attention sub-layer (attention.cc, attention_forward.cc):
// one layer's loaded weights and dimensions.
#pragma once

#include <cstdint>
#include <vector>

#include "model/linear.h"
#include "tensor/tensor.h"

namespace dsv4::model {

struct AttentionWeights {
  // Dimensions (the names of docs/model.md "Reference semantics").
  int64_t dim = 0;       // D
  int64_t n_heads = 0;   // H
  int64_t head_dim = 0;  // d
  int64_t rope_dim = 0;  // rd
  int64_t q_lora = 0;
  int64_t n_groups = 0;  // o_groups
  int64_t o_lora = 0;    // o_lora_rank
  int64_t window = 0;    // sliding_window
  int64_t index_head_dim = 0;
  float eps = 1e-6f;
  float softmax_scale = 0;  // fp32(head_dim^-0.5)

  Linear wq_a;           // [q_lora, D] FP8 (native) or BF16 (W8A8)
  Buffer q_norm;         // [q_lora] BF16
  Linear wq_b;           // [H*d, q_lora] FP8 or INT8
  Linear wkv;            // [d, D] FP8 or BF16
  Buffer kv_norm;        // [d] BF16
  Bf16OrFp8Linear wo_a;  // [G*o_lora, H*d/G], BF16 numerics (FP8 read in place, or BF16 in W8A8)
  Linear wo_b;           // [D, G*o_lora] FP8 or INT8
  Buffer sink;           // [H] FP32
  std::vector<float> freqs;  // [rd/2], this layer's RoPE profile
};

}  // namespace dsv4::model
