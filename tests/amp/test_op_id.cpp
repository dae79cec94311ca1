// Op identity and the policy table: every op the dispatcher runs (OpId) has a
// row on each device type or is listed in amp/policy.cpp as deliberately
// without one, so adding or renaming an op without deciding its autocast
// policy fails here; and the lock-free lookup by OpId answers as the lookup by
// name does, overrides included.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include <halfgrad.h>
#include <halfgrad/amp/op_policy.h>
#include <halfgrad/dispatch/op_id.h>

namespace hg = halfgrad;
using hg::DeviceType;
using hg::OpId;
using hg::amp::CastPolicy;

namespace {
constexpr DeviceType kDevices[] = {DeviceType::CPU, DeviceType::CUDA};

OpId op_at(size_t i) { return static_cast<OpId>(i); }

std::set<std::string> row_names(DeviceType d) {
  std::set<std::string> names;
  for (const auto& r : hg::amp::policy_rows(d)) names.insert(r.op);
  return names;
}

// Every row (built-in or added at run time) and every OpId: by OpId == by name.
void check_lookups_agree() {
  for (DeviceType d : kDevices) {
    for (const auto& r : hg::amp::policy_rows(d)) {
      INFO(hg::device_type_name(d) << " row " << r.op);
      CHECK(hg::amp::lookup_policy(d, r.op) == r.policy);
      if (const auto id = hg::find_op(r.op)) CHECK(hg::amp::lookup_policy(d, *id) == r.policy);
    }
    for (size_t i = 0; i < hg::kOpCount; ++i) {
      INFO(hg::device_type_name(d) << " op " << hg::op_name(op_at(i)));
      CHECK(hg::amp::lookup_policy(d, op_at(i)) == hg::amp::lookup_policy(d, hg::op_name(op_at(i))));
    }
  }
}
}  // namespace

TEST_CASE("Op ids: names are unique and round-trip through find_op", "[amp][op_id]") {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < hg::kOpCount; ++i) {
    const std::string_view name = hg::op_name(op_at(i));
    INFO(name);
    CHECK(!name.empty());
    CHECK(seen.insert(name).second);
    CHECK(hg::find_op(name) == op_at(i));
  }
  CHECK_FALSE(hg::find_op("conv_tbc").has_value());  // a row for an op we do not have
  CHECK_FALSE(hg::find_op("add_").has_value());    // in-place ops take their op's id
  STATIC_REQUIRE(hg::op_name(OpId::linear_gelu_tanh) == "linear_gelu_tanh");
  STATIC_REQUIRE(hg::find_op("binary_cross_entropy_with_logits") == OpId::binary_cross_entropy_with_logits);
}

TEST_CASE("Op ids: every op has a policy row on each device type or is listed as deliberately without one",
          "[amp][op_id]") {
  hg::amp::reset_policies();
  for (DeviceType d : kDevices) {
    const std::set<std::string> rows = row_names(d);
    std::set<std::string> no_row;
    for (std::string_view name : hg::amp::ops_without_row(d)) {
      INFO(hg::device_type_name(d) << ": listed without a row: " << name);
      CHECK(hg::find_op(name).has_value());   // a stale entry (renamed or removed op) fails here
      CHECK(rows.count(std::string(name)) == 0);  // listed and given a row: decide which
      CHECK(no_row.insert(std::string(name)).second);  // listed twice
    }
    for (size_t i = 0; i < hg::kOpCount; ++i) {
      const std::string name(hg::op_name(op_at(i)));
      INFO(hg::device_type_name(d) << ": op " << name
                                   << " has no policy row and is not in amp/policy.cpp's list of ops without one");
      CHECK((rows.count(name) == 1 || no_row.count(name) == 1));
      CHECK(hg::amp::lookup_policy(d, op_at(i)).has_value() == (rows.count(name) == 1));
    }
  }
}

TEST_CASE("Op ids: lookup by OpId gives the answer of lookup by name, overrides included", "[amp][op_id]") {
  hg::amp::reset_policies();
  check_lookups_agree();
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::linear) == CastPolicy::LowerPrecision);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::exp) == CastPolicy::Fp32);
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CPU, OpId::exp).has_value());
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::binary_cross_entropy) == CastPolicy::Banned);
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CUDA, OpId::relu).has_value());

  hg::amp::set_policy(DeviceType::CPU, "exp", CastPolicy::Fp32);           // add a row
  hg::amp::set_policy(DeviceType::CPU, "linear", std::nullopt);            // remove one
  hg::amp::set_policy(DeviceType::CUDA, "softmax", CastPolicy::Promote);   // change one
  hg::amp::set_policy(DeviceType::CUDA, "conv_tbc", CastPolicy::Fp32);     // an op we do not have
  hg::amp::set_policy(DeviceType::CUDA, "my_op", CastPolicy::Promote);     // not an op at all
  CHECK(hg::amp::lookup_policy(DeviceType::CPU, OpId::exp) == CastPolicy::Fp32);
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CPU, OpId::linear).has_value());
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::linear) == CastPolicy::LowerPrecision);  // other device
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::softmax) == CastPolicy::Promote);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, "conv_tbc") == CastPolicy::Fp32);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, "my_op") == CastPolicy::Promote);
  check_lookups_agree();

  hg::amp::reset_policies();
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CPU, OpId::exp).has_value());
  CHECK(hg::amp::lookup_policy(DeviceType::CPU, OpId::linear) == CastPolicy::LowerPrecision);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, OpId::softmax) == CastPolicy::Fp32);
  CHECK(hg::amp::lookup_policy(DeviceType::CUDA, "conv_tbc") == CastPolicy::LowerPrecision);
  CHECK_FALSE(hg::amp::lookup_policy(DeviceType::CUDA, "my_op").has_value());
  check_lookups_agree();
}

TEST_CASE("Op ids: an override by name reaches the dispatcher (CPU autocast)", "[amp][op_id]") {
  hg::amp::reset_policies();
  auto a = hg::randn({3}), b = hg::randn({3});
  {
    hg::amp::autocast region(DeviceType::CPU);
    CHECK(hg::exp(a).dtype() == hg::DType::Float32);  // no CPU row: input dtype
    hg::amp::set_policy(DeviceType::CPU, "add", CastPolicy::LowerPrecision);
    CHECK(hg::add(a, b).dtype() == hg::DType::BFloat16);
    hg::amp::reset_policies();
    CHECK(hg::add(a, b).dtype() == hg::DType::Float32);
  }
}
