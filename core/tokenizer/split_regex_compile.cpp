// The compiler of split_regex.hpp: the pattern is parsed (recursive descent over its code points)
// into a tree, and the tree emitted as a program of characters, splits, jumps, look-aheads and
// atomic groups, which split_regex.cpp runs.
#include "runtime/error.hpp"
#include "tokenizer/split_regex.hpp"
#include "tokenizer/unicode.hpp"

#include <limits>

namespace zf {
namespace {

constexpr int kUnbounded = std::numeric_limits<int>::max();
constexpr size_t kMaxProgram = 1 << 16;  // instructions

struct Node {
  enum Kind { sequence, alternation, character, repeat, look_ahead, look_ahead_not, atomic } kind = sequence;
  std::vector<Node> children;
  int class_index = 0;
  int min = 1, max = 1;
  bool greedy = true, possessive = false;
};

// Whether the node can match without reading a character.
bool nullable(const Node &node) {
  switch (node.kind) {
    case Node::character: return false;
    case Node::sequence:
      for (const Node &child : node.children)
        if (!nullable(child)) return false;
      return true;
    case Node::alternation:
      for (const Node &child : node.children)
        if (nullable(child)) return true;
      return false;
    case Node::repeat: return node.min == 0 || nullable(node.children[0]);
    case Node::look_ahead:
    case Node::look_ahead_not: return true;
    case Node::atomic: return nullable(node.children[0]);
  }
  return true;
}

Node make(Node::Kind kind) {
  Node node;
  node.kind = kind;
  return node;
}

}  // namespace

class RegexCompiler {
 public:
  RegexCompiler(SplitRegex &regex, const std::string &pattern) : regex_(regex), pattern_(pattern) {
    for (size_t position = 0; position < pattern.size();) {
      CodePoint c = decode_utf8(pattern, position);
      ZF_REQUIRE(c.valid, "split pattern %s: byte %zu is not UTF-8", quoted().c_str(), position);
      chars_.push_back(c.value);
      position += c.length;
    }
  }

  void compile() {
    Node root = alternation(false);
    if (at_ < chars_.size()) fail("an unmatched ')'");
    emit(root);
    regex_.program_.push_back({SplitRegex::Inst::match, 0, 0});
  }

 private:
  [[noreturn]] void fail(const std::string &what) const {
    throw Error(format("split pattern %s: %s at character %zu; zfcore reads literals, classes [...], \\s \\d \\w, "
                       "\\p{..}, groups (?:) (?i:) (?=) (?!) (?>), quantifiers and |",
                       quoted().c_str(), what.c_str(), at_));
  }
  std::string quoted() const { return "\"" + pattern_ + "\""; }
  bool done() const { return at_ >= chars_.size(); }
  uint32_t peek(size_t ahead = 0) const { return at_ + ahead < chars_.size() ? chars_[at_ + ahead] : 0; }
  bool eat(uint32_t c) {
    if (done() || chars_[at_] != c) return false;
    ++at_;
    return true;
  }

  Node alternation(bool ignore_case) {
    Node node = make(Node::alternation);
    node.children.push_back(sequence(ignore_case));
    while (eat('|')) node.children.push_back(sequence(ignore_case));
    return node.children.size() == 1 ? node.children[0] : node;
  }

  Node sequence(bool ignore_case) {
    Node node = make(Node::sequence);
    while (!done() && peek() != '|' && peek() != ')') {
      Node atom_node = atom(ignore_case);
      quantifier(atom_node, node);
    }
    return node;
  }

  void quantifier(Node &atom_node, Node &sequence_node) {
    Node repeat = make(Node::repeat);
    if (eat('?')) repeat.min = 0, repeat.max = 1;
    else if (eat('*')) repeat.min = 0, repeat.max = kUnbounded;
    else if (eat('+')) repeat.min = 1, repeat.max = kUnbounded;
    else if (peek() == '{' && counted(repeat)) {
    } else {
      sequence_node.children.push_back(std::move(atom_node));
      return;
    }
    if (eat('?')) repeat.greedy = false;
    else if (eat('+')) repeat.possessive = true;
    if (repeat.max == kUnbounded && nullable(atom_node)) fail("an unbounded repeat of something that can match nothing");
    repeat.children.push_back(std::move(atom_node));
    sequence_node.children.push_back(std::move(repeat));
  }

  // {n} {n,} {n,m}; false (nothing read) when the brace does not start one (it is then a literal).
  bool counted(Node &repeat) {
    size_t save = at_;
    ++at_;
    auto number = [&](int *out) {
      size_t begin = at_;
      long value = 0;
      while (peek() >= '0' && peek() <= '9' && value < 100000) value = value * 10 + (chars_[at_++] - '0');
      *out = int(value);
      return at_ > begin;
    };
    int min = 0, max = 0;
    bool ok = number(&min);
    if (ok && eat(',')) max = number(&max) ? max : kUnbounded;
    else max = min;
    if (!ok || !eat('}') || max < min) {
      at_ = save;
      return false;
    }
    repeat.min = min;
    repeat.max = max;
    return true;
  }

  Node atom(bool ignore_case) {
    uint32_t c = chars_[at_++];
    if (c == '(') return group(ignore_case);
    if (c == '[') return character(bracket(ignore_case));
    if (c == '.') return character(single({SplitRegex::Item::any_but_newline}, false));
    if (c == '^' || c == '$') fail(std::string("the anchor '") + char(c) + "'");
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing before it");
    if (c == '\\') {
      SplitRegex::Item item = escape(false);
      return character(single(item, ignore_case));
    }
    return character(single(range_item(c, c), ignore_case));
  }

  Node group(bool ignore_case) {
    Node::Kind kind = Node::sequence;
    if (eat('?')) {
      if (eat(':')) {
      } else if (eat('=')) kind = Node::look_ahead;
      else if (eat('!')) kind = Node::look_ahead_not;
      else if (eat('>')) kind = Node::atomic;
      else if (peek() == 'i' && peek(1) == ':') at_ += 2, ignore_case = true;
      else if (peek() == '-' && peek(1) == 'i' && peek(2) == ':') at_ += 3, ignore_case = false;
      else fail("a group kind (?" + encode_utf8(peek()) + " that is not read");
    }
    Node inner = alternation(ignore_case);
    if (!eat(')')) fail("a '(' without its ')'");
    if (kind == Node::sequence) return inner;
    Node node = make(kind);
    node.children.push_back(std::move(inner));
    return node;
  }

  static SplitRegex::Item range_item(uint32_t first, uint32_t last) {
    SplitRegex::Item item;
    item.first = first;
    item.last = last;
    return item;
  }

  // After a backslash. In a class, `in_class` lets \b mean backspace (as Oniguruma reads it).
  SplitRegex::Item escape(bool in_class) {
    if (done()) fail("a pattern that ends with a backslash");
    uint32_t c = chars_[at_++];
    SplitRegex::Item item;
    switch (c) {
      case 's': case 'S': item.kind = SplitRegex::Item::space; item.negated = c == 'S'; return item;
      case 'w': case 'W': item.kind = SplitRegex::Item::word; item.negated = c == 'W'; return item;
      case 'd': case 'D':
        item.kind = SplitRegex::Item::categories;
        item.mask = category_mask("Nd");
        item.negated = c == 'D';
        return item;
      case 'p': case 'P': {
        item.kind = SplitRegex::Item::categories;
        item.negated = c == 'P';
        if (!eat('{')) fail("\\p without {name}");
        std::string name;
        while (!done() && peek() != '}') name += encode_utf8(chars_[at_++]);
        if (!eat('}')) fail("\\p{ without its }");
        if (!name.empty() && name[0] == '^') item.negated = !item.negated, name.erase(0, 1);
        item.mask = category_mask(name);
        if (!item.mask) fail("\\p{" + name + "}, which is not a general category");
        return item;
      }
      case 'r': return range_item('\r', '\r');
      case 'n': return range_item('\n', '\n');
      case 't': return range_item('\t', '\t');
      case 'f': return range_item('\f', '\f');
      case 'v': return range_item('\v', '\v');
      case 'a': return range_item('\a', '\a');
      case 'e': return range_item(0x1B, 0x1B);
      case 'x': case 'u': return range_item(hex(c), hex(c));
      default: break;
    }
    if (in_class && c == 'b') return range_item('\b', '\b');
    bool letter_or_digit = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (letter_or_digit) fail(std::string("the escape \\") + char(c));
    return range_item(c, c);  // escaped punctuation stands for itself
  }

  uint32_t hex(uint32_t kind) {
    bool braced = kind == 'x' && eat('{');
    size_t digits = braced ? 8 : kind == 'x' ? 2 : 4;
    uint32_t value = 0;
    size_t count = 0;
    for (; count < digits && !done(); ++count) {
      uint32_t d = peek();
      int v = d >= '0' && d <= '9' ? int(d - '0') : d >= 'a' && d <= 'f' ? int(d - 'a' + 10)
              : d >= 'A' && d <= 'F' ? int(d - 'A' + 10) : -1;
      if (v < 0) break;
      value = value * 16 + uint32_t(v);
      ++at_;
    }
    if (count == 0 || (braced && !eat('}'))) fail("a malformed \\x or \\u escape");
    return value;
  }

  int bracket(bool ignore_case) {
    SplitRegex::Class cls;
    cls.ignore_case = ignore_case;
    cls.negated = eat('^');
    bool first = true;
    while (true) {
      if (done()) fail("a '[' without its ']'");
      uint32_t c = chars_[at_];
      if (c == ']' && !first) break;
      first = false;
      ++at_;
      if (c == '[') fail("a nested class or a class operation ([...[ or &&)");
      if (c == '&' && peek() == '&') fail("a class intersection (&&)");
      SplitRegex::Item item = c == '\\' ? escape(true) : range_item(c, c);
      bool single_char = item.kind == SplitRegex::Item::range && !item.negated;
      if (single_char && peek() == '-' && peek(1) != ']' && at_ + 1 < chars_.size()) {
        ++at_;
        uint32_t last_char = chars_[at_++];
        if (last_char == '\\') {
          SplitRegex::Item end = escape(true);
          if (end.kind != SplitRegex::Item::range) fail("a range that ends in a class");
          last_char = end.first;
        }
        if (last_char < item.first) fail("a range whose end is before its start");
        item.last = last_char;
      }
      cls.items.push_back(item);
    }
    ++at_;  // ]
    regex_.classes_.push_back(std::move(cls));
    return int(regex_.classes_.size()) - 1;
  }

  int single(const SplitRegex::Item &item, bool ignore_case) {
    SplitRegex::Class cls;
    cls.items.push_back(item);
    cls.ignore_case = ignore_case;
    regex_.classes_.push_back(std::move(cls));
    return int(regex_.classes_.size()) - 1;
  }

  static Node character(int class_index) {
    Node node = make(Node::character);
    node.class_index = class_index;
    return node;
  }

  int32_t here() const { return int32_t(regex_.program_.size()); }
  int32_t add(SplitRegex::Inst::Op op, int32_t x = 0, int32_t y = 0) {
    if (regex_.program_.size() >= kMaxProgram) fail("a pattern whose counted repeats make it too large");
    regex_.program_.push_back({op, x, y});
    return here() - 1;
  }

  void emit(const Node &node) {
    using Inst = SplitRegex::Inst;
    auto &program = regex_.program_;
    switch (node.kind) {
      case Node::sequence:
        for (const Node &child : node.children) emit(child);
        break;
      case Node::character:
        add(Inst::character, node.class_index);
        break;
      case Node::alternation: {
        std::vector<int32_t> jumps;
        for (size_t i = 0; i < node.children.size(); ++i) {
          int32_t split = i + 1 < node.children.size() ? add(Inst::split) : -1;
          if (split >= 0) program[split].x = here();
          emit(node.children[i]);
          if (split >= 0) {
            jumps.push_back(add(Inst::jump));
            program[split].y = here();
          }
        }
        for (int32_t jump : jumps) program[jump].x = here();
        break;
      }
      case Node::look_ahead:
      case Node::look_ahead_not:
      case Node::atomic: {
        Inst::Op op = node.kind == Node::look_ahead ? Inst::look_ahead
                      : node.kind == Node::look_ahead_not ? Inst::look_ahead_not : Inst::atomic;
        int32_t head = add(op);
        emit(node.children[0]);
        add(Inst::match);
        program[head].x = here();
        break;
      }
      case Node::repeat: {
        if (node.possessive) {
          Node inner = node;
          inner.possessive = false;
          Node wrapper = make(Node::atomic);
          wrapper.children.push_back(std::move(inner));
          emit(wrapper);
          break;
        }
        const Node &body = node.children[0];
        for (int i = 0; i < node.min; ++i) emit(body);
        if (node.max == kUnbounded) {
          int32_t loop = add(Inst::split);
          emit(body);
          add(Inst::jump, loop);
          set_choice(loop, loop + 1, here(), node.greedy);
        } else {
          std::vector<int32_t> splits;
          for (int i = node.min; i < node.max; ++i) {
            splits.push_back(add(Inst::split));
            emit(body);
          }
          for (int32_t split : splits) set_choice(split, split + 1, here(), node.greedy);
        }
        break;
      }
    }
  }

  void set_choice(int32_t split, int32_t take, int32_t skip, bool greedy) {
    regex_.program_[split].x = greedy ? take : skip;
    regex_.program_[split].y = greedy ? skip : take;
  }

  SplitRegex &regex_;
  const std::string &pattern_;
  std::vector<uint32_t> chars_;
  size_t at_ = 0;
};

SplitRegex::SplitRegex(const std::string &pattern) : pattern_(pattern) {
  RegexCompiler(*this, pattern).compile();
}

}  // namespace zf
