#include "hpctrain/core/version.h"

#include "hpctrain/core/version_generated.h"

namespace hpctrain {

const char* version() { return HPCTRAIN_VERSION; }

}  // namespace hpctrain
