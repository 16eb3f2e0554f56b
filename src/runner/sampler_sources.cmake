# The full sampler (penalties, temperature, min_p/top_k/top_p, seeded
# streams, logprobs, rejection-sampling verification).  Included by the
# runner layer's CMakeLists.txt in place of the argmax-only stand-in
# sampler_greedy.cc; paths are relative to src/runner.
set(RUNNER_SAMPLER_SOURCES sampler.cc token_distribution.cc)
