// hpctrain's own version. Depends on nothing.
#pragma once

namespace hpctrain {

const char* version();

}  // namespace hpctrain
