// Fuzz target: a Hugging Face config.json, as model.init_from reads it (shape_from_hf_config).
// An accepted shape must survive the way back: the config.json an export writes for it
// (hf_config) reads as the same shape.
#include "fuzz_target.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text = zf::fuzz::input_text(data, size), name = "fuzz/config.json";
  zf::TransformerShape shape;
  if (!zf::fuzz::accepts(name, [&] { shape = zf::shape_from_hf_config(zf::parse_json(text, name), name); })) return 0;
  zf::fuzz::must_succeed("reading back the exported config.json", [&] {
    zf::TransformerShape again = zf::shape_from_hf_config(zf::hf_config(shape, "float32", 0), "exported config.json");
    zf::fuzz::require(again == shape, "the exported config.json reads back as another shape: " +
                                          zf::shape_difference(shape, again, "read", "exported"));
  });
  return 0;
}
