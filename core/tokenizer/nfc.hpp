// nfc.hpp: Unicode normalization form C (canonical decomposition, canonical ordering, canonical
// composition), the NFC normalizer of Qwen's tokenizer.json files. Tables: nfc_tables.inc.
#pragma once

#include <string>

namespace zf {

// text in NFC. Bytes that are not UTF-8 are kept as they are and break composition around them.
std::string to_nfc(const std::string &text);

}  // namespace zf
