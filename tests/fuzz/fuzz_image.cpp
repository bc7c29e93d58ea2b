// libFuzzer harness: image decoding through our path (data/image.h decode_image): JPEG by
// libjpeg-turbo, PNG and BMP by stb_image, then the channel conversion. The input is the file;
// the channel count asked for (keep, gray, RGB) is picked from the input's length, so each
// conversion path sees every format without a framing byte that would break the signatures.
#include <cstdint>

#include "core/check.h"
#include "data/image.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int kChannels[] = {0, 1, 3};
  const int channels = kChannels[size % 3];
  try {
    const data::Image img = data::decode_image({data, size}, channels, "fuzz.img");
    if (img.height <= 0 || img.width <= 0 || (img.channels != 1 && img.channels != 3) ||
        (channels && img.channels != channels) ||
        img.pixels.size() != size_t(img.height) * size_t(img.width) * size_t(img.channels))
      __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
