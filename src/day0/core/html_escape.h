#pragma once
// HTML escaping shared by the report (HTML, inline SVG) and the Jinja `escape` filter.
#include <string>
#include <string_view>

namespace day0 {

// & < > " ' as &amp; &lt; &gt; &#34; &#39;: markupsafe's output, which Jinja's `escape` must match
// byte for byte; the numeric forms are valid in HTML text, attributes and SVG alike.
std::string html_escape(std::string_view text);

}  // namespace day0
