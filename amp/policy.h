#pragma once
// The cast-policy table: the whole story of which dtype each op runs in
// under autocast. One row per op name and device type; an op without a row
// runs in its inputs' dtypes. Data, not code: amp/policy.cpp lists the rows
// (PyTorch's lists, ops we do not have yet included), and users may override
// a row at run time. The dispatcher looks rows up by op identity, without a
// lock (amp/op_policy.h, internal); these name-based functions stay the
// public interface.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <halfgrad/core/device.h>

namespace halfgrad::amp {

enum class CastPolicy {
  LowerPrecision,  // run in the region's dtype (float16 / bfloat16)
  Fp32,            // run in float32
  Promote,         // run in the widest floating dtype among the inputs
  Banned,          // unsafe under autocast: an Error that names the safe alternative
};

std::string_view policy_name(CastPolicy p);  // "lower_precision", "fp32", "promote", "banned"

struct PolicyRow {
  std::string op;
  CastPolicy policy;
  std::string note;  // shown in the printed table (e.g. "fp32 through the op's dtype argument")
};

// The row for `op` on `device` (an override if the user set one), or nothing.
std::optional<CastPolicy> lookup_policy(DeviceType device, std::string_view op);

// All rows for a device type, built-in rows with overrides applied, in table order.
std::vector<PolicyRow> policy_rows(DeviceType device);

// Run-time override: set a row (adding it if the op has none), or with
// std::nullopt remove it so the op runs in its inputs' dtypes.
void set_policy(DeviceType device, std::string_view op, std::optional<CastPolicy> policy);
// Back to the built-in table.
void reset_policies();

// The message of a Banned row (why, and what to use instead).
std::string banned_message(DeviceType device, std::string_view op);

// The table as Markdown (what `halfgrad-policy` prints and docs/amp.md shows).
std::string policy_markdown();

}  // namespace halfgrad::amp
