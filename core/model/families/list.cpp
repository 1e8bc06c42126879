// The families zfcore reads, one file each in this folder (family.hpp).
#include "model/family.hpp"

namespace zf {

Family llama_family();
Family qwen2_family();
Family qwen3_family();
Family mistral_family();
Family ministral3_family();
Family olmo2_family();
Family olmo3_family();
Family gemma3_family();
Family gemma4_family();
Family phi3_family();
Family smollm3_family();
Family granite_family();
Family qwen3_5_text_family();
Family gemma3_image_text_family();
Family gemma4_image_text_family();
Family qwen3_5_image_text_family();
Family qwen3_moe_family();
Family mixtral_family();
Family olmoe_family();
Family qwen3_5_moe_text_family();
Family qwen3_5_moe_image_text_family();
Family gpt_oss_family();

const std::vector<Family> &families() {
  static const std::vector<Family> all = {llama_family(),  qwen2_family(),   qwen3_family(),  mistral_family(),
                                          ministral3_family(), olmo2_family(), olmo3_family(), gemma3_family(),
                                          gemma4_family(),
                                          phi3_family(),   smollm3_family(), granite_family(),
                                          qwen3_5_text_family(), gemma3_image_text_family(),
                                          qwen3_5_image_text_family(), gemma4_image_text_family(), qwen3_moe_family(), mixtral_family(),
                                          olmoe_family(), qwen3_5_moe_text_family(),
                                          qwen3_5_moe_image_text_family(), gpt_oss_family()};
  return all;
}

const Family *find_family(const std::string &type) {
  for (const Family &family : families())
    if (family.type == type) return &family;
  return nullptr;
}

std::string family_names() {
  std::string names = "gpt2";
  for (const Family &family : families()) names += ", " + family.type;
  return names;
}

}  // namespace zf
