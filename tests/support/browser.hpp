// browser.hpp: zfcore's HTML reports loaded in a real headless browser (Debian's chromium), as a
// user opens them: the DOM after the page's scripts ran, and the markup of one of its charts.
#pragma once

#include <string>

namespace zf::test {

// "chromium" or "chromium-browser", whichever is installed; "" when neither is.
std::string chromium();
// The DOM of `html_file` after the page loaded and its scripts ran (a failure to run the browser
// fails the test). A profile directory of each page's own: ctest runs test cases side by side.
std::string dump_dom(const std::string &browser, const std::string &html_file);
// The markup of the chart <svg class="chart" data-chart="id">...</svg> in an HTML text; "" if absent.
std::string chart(const std::string &html, const std::string &id);
// How often `what` occurs in `text`.
size_t count(const std::string &text, const std::string &what);

}  // namespace zf::test
