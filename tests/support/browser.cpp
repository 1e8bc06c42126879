#include "support/browser.hpp"

#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

namespace zf::test {

std::string chromium() {
  for (const char *name : {"chromium", "chromium-browser"})
    if (run_command(std::string("command -v ") + name).exit_code == 0) return name;
  return "";
}

std::string dump_dom(const std::string &browser, const std::string &html_file) {
  namespace fs = std::filesystem;
  std::string profile = scratch_dir("browser_profile_" + fs::path(html_file).parent_path().filename().string() + "_" +
                                    fs::path(html_file).stem().string());
  auto outcome = run_command("timeout 60 " + browser + " --headless --no-sandbox --disable-gpu " +
                             "--user-data-dir=" + profile + " --dump-dom file://" + fs::absolute(html_file).string() +
                             " 2>/dev/null");
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  return outcome.output;
}

std::string chart(const std::string &html, const std::string &id) {
  size_t begin = html.find("<svg class=\"chart\" data-chart=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</svg>", begin) + 6 - begin);
}

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace zf::test
