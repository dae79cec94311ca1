#pragma once
// The policy table seen by OpId (internal: not installed). The built-in rows
// are name-keyed (amp/policy.cpp, PyTorch's lists); at first use the rows of
// ops halfgrad has resolve into one array of atomics per device type, indexed
// by OpId, so the dispatcher's lookup is one relaxed load and takes no lock.
// set_policy / reset_policies (amp/policy.h) keep the array current.
#include <optional>
#include <span>
#include <string_view>

#include <halfgrad/amp/policy.h>
#include <halfgrad/dispatch/op_id.h>

namespace halfgrad::amp {

// The row for `op` on `device` (an override if the user set one), or nothing:
// the same answer as lookup_policy(device, op_name(op)), without a lock.
std::optional<CastPolicy> lookup_policy(DeviceType device, OpId op);

// The ops deliberately without a row on `device` (they run in their inputs'
// dtypes): every OpId has a built-in row there or is listed here
// (tests/amp/test_op_id.cpp checks both ways).
std::span<const std::string_view> ops_without_row(DeviceType device);

}  // namespace halfgrad::amp
