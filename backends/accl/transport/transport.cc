#include "transport/transport.h"

#include <sstream>

#include "accl/process_group.h"

namespace accl {
namespace core {

std::string describe(const OpDesc& d) {
  std::ostringstream os;
  os << toString(static_cast<OpType>(d.op)) << " #" << d.seq << " (" << d.count << " x "
     << toString(static_cast<DataType>(d.dtype));
  auto op = static_cast<OpType>(d.op);
  if (op == OpType::Allreduce || op == OpType::Reduce || op == OpType::ReduceScatter ||
      op == OpType::ReduceScatterv)
    os << ", " << toString(static_cast<ReduceKind>(d.redop));
  if (d.root >= 0) os << ", root " << d.root;
  os << ")";
  return os.str();
}

}  // namespace core
}  // namespace accl
