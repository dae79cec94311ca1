#pragma once
// Shape: the sizes (or strides, or dims) of a tensor: a std::vector<int64_t>
// that keeps up to kInline values inside itself. Every tensor holds two of
// them and every op builds a few more; as std::vectors they were a third of the
// heap allocations of a small training step (docs/performance.md, "Per-op host
// cost"). PyTorch keeps its sizes the same way (c10::SmallVector). Boost and
// Abseil have small vectors too, but a Shape must also convert to and from
// std::vector<int64_t> (the type users pass and receive), so it is our own, and
// only the part of vector's interface the project uses.
#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <vector>

namespace halfgrad {

class Shape {
 public:
  static constexpr uint32_t kInline = 6;  // rank of every tensor in the project but a few in tests
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Shape(size_t n, int64_t value = 0) { resize(n, value); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT(implicit)
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { steal(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      free_heap();
      steal(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> v) {
    assign(v.begin(), v.end());
    return *this;
  }
  ~Shape() { free_heap(); }

  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT(implicit)
  std::vector<int64_t> vec() const { return *this; }

  // --- std::vector's interface (the part the project uses) ----------------
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  int64_t& at(size_t i) { return i < size_ ? data_[i] : throw std::out_of_range("Shape::at"); }
  const int64_t& at(size_t i) const { return i < size_ ? data_[i] : throw std::out_of_range("Shape::at"); }
  int64_t& front() { return data_[0]; }
  const int64_t& front() const { return data_[0]; }
  int64_t& back() { return data_[size_ - 1]; }
  const int64_t& back() const { return data_[size_ - 1]; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  void reserve(size_t n) {
    if (n > cap_) grow(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == cap_) grow(2 * size_t{cap_});
    data_[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { --size_; }
  template <typename It>
  void assign(It first, It last) {
    const auto n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data_);
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  iterator insert(const_iterator pos, int64_t v) { return insert(pos, &v, &v + 1); }
  iterator insert(const_iterator pos, size_t n, int64_t v) {
    const size_t at = pos - begin();
    open_gap(at, n);
    std::fill_n(data_ + at, n, v);
    return data_ + at;
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = pos - begin();
    const Shape values(first, last);  // may alias *this
    open_gap(at, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> v) { return insert(pos, v.begin(), v.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = first - begin(), n = last - first;
    std::copy(data_ + at + n, end(), data_ + at);
    size_ -= static_cast<uint32_t>(n);
    return data_ + at;
  }
  void swap(Shape& o) noexcept {
    Shape t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool on_heap() const { return data_ != inline_; }
  void free_heap() {
    if (on_heap()) ::operator delete(data_);
    data_ = inline_;
    cap_ = kInline;
  }
  void grow(size_t n) {
    n = std::max<size_t>(n, kInline + 1);
    auto* p = static_cast<int64_t*>(::operator new(n * sizeof(int64_t)));
    std::copy(begin(), end(), p);
    free_heap();
    data_ = p;
    cap_ = static_cast<uint32_t>(n);
  }
  void steal(Shape& o) {
    if (o.on_heap()) {
      data_ = o.data_;
      cap_ = o.cap_;
    } else {
      data_ = inline_;
      cap_ = kInline;
      std::copy(o.begin(), o.end(), inline_);
    }
    size_ = o.size_;
    o.data_ = o.inline_;
    o.cap_ = kInline;
    o.size_ = 0;
  }
  void open_gap(size_t at, size_t n) {
    reserve(size_ + n);
    std::copy_backward(data_ + at, end(), end() + n);
    size_ += static_cast<uint32_t>(n);
  }

  int64_t* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  int64_t inline_[kInline];
};

}  // namespace halfgrad
