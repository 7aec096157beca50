#pragma once
// Stop strings over streamed text: matched across token boundaries (the text of several tokens can
// form one stop string), never emitted. Text that could still be the start of a stop string is held
// back until the next piece shows it is not; once a stop string appears, it and everything after it
// are dropped. Pieces must be whole UTF-8 characters (StreamingDecoder's output), so what is
// released is too: a stop string starts on a character boundary.
// Thread safety: none (one sequence, one thread).
#include <string>
#include <string_view>
#include <vector>

namespace day0::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds `piece`; returns the text that is now final (empty while a possible stop string is held).
  std::string push(std::string_view piece);
  // The held-back rest when generation ends without a stop string ("" after one).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace day0::serve
