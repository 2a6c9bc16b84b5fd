// Tensor, the CPU backend's raw kernels, and the Philox generator.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "platipus/backend/block_cache.hpp"
#include "platipus/backend/counting.hpp"
#include "platipus/backend/cpu/cpu.hpp"
#include "platipus/tensor/elementwise.hpp"
#include "platipus/tensor/index.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/matmul.hpp"
#include "platipus/tensor/random.hpp"
#include "platipus/tensor/reduce.hpp"
#include "resident_memory.hpp"

using namespace platipus;
using Catch::Contains;
using T = Tensor<double>;

namespace {

T iota(const Shape& shape, double start = 0, double step = 1) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return T::from_host(shape, v);
}

std::vector<std::size_t> raw_requests;
void* counting_allocate(std::size_t bytes) {
  raw_requests.push_back(bytes);
  return ::operator new(bytes);
}
void counting_free(void* p) {
  ::operator delete(p);
}

}  // namespace

TEST_CASE("the block cache rounds up by less than a sixteenth and reuses blocks within a class",
          "[tensor][memory]") {
  raw_requests.clear();
  {
    detail::BlockCache<&counting_allocate, &counting_free> cache;
    for (std::size_t bytes :
         {std::size_t{1}, std::size_t{64}, std::size_t{65}, std::size_t{100}, std::size_t{1000},
          std::size_t{4097}, std::size_t{3'000'001}, std::size_t{33'554'432}}) {
      INFO(bytes << " bytes");
      void* p = cache.allocate(bytes);
      REQUIRE(!raw_requests.empty());
      const std::size_t block = raw_requests.back();
      CHECK(block >= bytes);
      if (bytes > 64) CHECK(static_cast<double>(block) < 1.0625 * static_cast<double>(bytes));
      cache.deallocate(p, bytes);
    }
    const std::size_t fresh = raw_requests.size();
    // 2,500,000 and 2,600,000 share 2^21 x (1 + 4/16) = 2,621,440; 3,700,000
    // takes 2^21 x (1 + 13/16) = 3,801,088.
    void* a = cache.allocate(2'500'000);
    CHECK(raw_requests.size() == fresh + 1);
    cache.deallocate(a, 2'500'000);
    void* b = cache.allocate(2'600'000);
    CHECK(b == a);
    CHECK(raw_requests.size() == fresh + 1);
    void* c = cache.allocate(3'700'000);
    CHECK(raw_requests.size() == fresh + 2);
    CHECK(raw_requests.back() == 3'801'088);
    cache.deallocate(b, 2'600'000);
    cache.deallocate(c, 3'700'000);
  }
}

TEST_CASE("a block cache adopts another's free blocks, and the other gives them out no more",
          "[tensor][memory]") {
  raw_requests.clear();
  detail::BlockCache<&counting_allocate, &counting_free> pool;
  {
    detail::BlockCache<&counting_allocate, &counting_free> cache;
    void* a = cache.allocate(1000);
    void* b = cache.allocate(5000);
    cache.deallocate(a, 1000);
    cache.deallocate(b, 5000);
    pool.adopt_free_blocks(cache);
    CHECK(pool.allocate(5000) == b);
    CHECK(pool.allocate(1000) == a);
    CHECK(raw_requests.size() == 2);
    void* c = cache.allocate(1000);  // a fresh block: `a` now belongs to the pool
    CHECK(c != a);
    CHECK(raw_requests.size() == 3);
    cache.deallocate(c, 1000);
    pool.deallocate(a, 1000);
    pool.deallocate(b, 5000);
  }  // `cache` frees `c` only; `pool` frees `a` and `b` when it goes
}

// A block that served a smaller request must not take new pages when a larger
// one of its class reuses it, or the resident set creeps up step after step.
TEST_CASE("a CPU block is resident from its first use, so its reuse takes no new memory",
          "[tensor][memory]") {
  // 77 MB and 79 MB of floats share the class of 2^26 x (1 + 3/16) bytes
  // (79.7 MB), which no other test here uses.
  const long before = resident_kib();
  { Tensor<float> first(Shape{77'000'000 / 4}); }
  const long after_first = resident_kib();
  { const auto second = Tensor<float>::full(Shape{79'000'000 / 4}, 1.0f); }
  const long after_second = resident_kib();
  INFO("resident " << before << ", " << after_first << ", " << after_second << " KiB");
  CHECK(after_first - before >= 79'691'776 / 1024 - 1024);
  CHECK(after_second - after_first < 1024);
}

TEST_CASE("tensors move cheaply and copy only when asked", "[tensor]") {
  T a = iota({2, 3});
  const double* storage = a.data();
  T b = std::move(a);
  CHECK(b.data() == storage);
  CHECK(a.empty());
  T c = b.clone();
  CHECK(c.data() != b.data());
  CHECK(c.to_vector() == b.to_vector());
  T d = std::move(c).reshaped({3, 2});
  CHECK(d.shape() == Shape{3, 2});
}

TEST_CASE("shapes broadcast by NumPy rules and say why they do not", "[tensor]") {
  CHECK(broadcast_shapes({4, 1, 3}, {5, 1}, "op") == Shape{4, 5, 3});
  CHECK(broadcast_shapes({}, {2, 2}, "op") == Shape{2, 2});
  CHECK_THROWS_WITH(broadcast_shapes({2, 3}, {4, 3}, "add"),
                    Contains("add") && Contains("[2, 3]") && Contains("[4, 3]"));
}

TEST_CASE("binary maps broadcast rows, columns and scalars", "[tensor]") {
  const T a = iota({2, 3});          // 0 1 2 / 3 4 5
  const T row = iota({3}, 10, 10);   // 10 20 30
  const T col = iota({2, 1}, 1, 1);  // 1 / 2
  CHECK(raw::map(BinaryOp::add, a, row, "add").to_vector() ==
        std::vector<double>{10, 21, 32, 13, 24, 35});
  CHECK(raw::map(BinaryOp::mul, a, col, "mul").to_vector() ==
        std::vector<double>{0, 1, 2, 6, 8, 10});
  CHECK(raw::map(BinaryOp::sub, T::scalar(1), a, "sub").to_vector() ==
        std::vector<double>{1, 0, -1, -2, -3, -4});
  const T outer = raw::map(BinaryOp::mul, col, iota({1, 3}, 1), "mul");
  CHECK(outer.shape() == Shape{2, 3});
  CHECK(outer.to_vector() == std::vector<double>{1, 2, 3, 2, 4, 6});
}

TEST_CASE("unary maps follow their formulas, stably", "[tensor]") {
  const T x = T::from_host({4}, {-800.0, -1.0, 0.5, 800.0});
  const auto sig = raw::map(UnaryOp::sigmoid, x).to_vector();
  CHECK(sig[0] == Approx(0.0));
  CHECK(sig[1] == Approx(1 / (1 + std::exp(1.0))));
  CHECK(sig[3] == Approx(1.0));
  const auto sp = raw::map(UnaryOp::softplus, x).to_vector();
  CHECK(sp[0] == Approx(0.0));
  CHECK(sp[2] == Approx(std::log1p(std::exp(0.5))));
  CHECK(sp[3] == Approx(800.0));
  CHECK(raw::map(UnaryOp::pow_scalar, T::from_host({2}, {2.0, 3.0}), 3.0).to_vector() ==
        std::vector<double>{8, 27});
}

TEST_CASE("sum_to reduces any set of broadcast axes", "[tensor]") {
  const T x = iota({2, 3, 4});
  auto total = [&](const Shape& s) {
    return raw::sum_to(x, s).to_vector();
  };
  CHECK(total({}) == std::vector<double>{276});
  CHECK(total({4}) == std::vector<double>{60, 66, 72, 78});
  CHECK(total({3, 1}) == std::vector<double>{60, 92, 124});
  CHECK(total({2, 1, 1}) == std::vector<double>{66, 210});
  CHECK(total({2, 1, 4}) == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  const auto max = raw::reduce_to(ReduceOp::max, x, {2, 3, 1}).to_vector();
  CHECK(max == std::vector<double>{3, 7, 11, 15, 19, 23});
  CHECK_THROWS_WITH(raw::sum_to(x, {5}), Contains("sum_to"));
}

// A conv bias's gradient: [N, C, H, W] summed to [1, C, 1, 1]. The CPU runs
// rows of distinct outputs side by side; each output must still take its
// elements in order, the same float bits as one running sum.
TEST_CASE("sums into few outputs equal one running sum per output, bit for bit", "[tensor]") {
  Generator gen(5);
  const std::int64_t n = 3, c = 11, h = 4, w = 5;
  const auto x = raw::normal<float>({n, c, h, w}, gen);
  const auto v = x.to_vector();
  std::vector<float> expected(static_cast<std::size_t>(c), 0.0f), largest = expected;
  for (std::int64_t ch = 0; ch < c; ++ch) {
    auto& sum = expected[static_cast<std::size_t>(ch)];
    auto& top = largest[static_cast<std::size_t>(ch)];
    top = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t e = 0; e < h * w; ++e) {
        const float value = v[static_cast<std::size_t>((i * c + ch) * h * w + e)];
        sum += value;
        top = std::max(top, value);
      }
  }
  CHECK(raw::sum_to(x, {1, c, 1, 1}).to_vector() == expected);
  CHECK(raw::reduce_to(ReduceOp::max, x, {1, c, 1, 1}).to_vector() == largest);
  // Rows that share an output (every row of [c, h w] to a scalar) as well.
  float all = 0;
  for (const float value : raw::slice(x, 0, 0, 1).to_vector()) all += value;
  CHECK(raw::sum_to(raw::slice(x, 0, 0, 1), {}).to_vector() == std::vector<float>{all});
}

// The gradient of an expanded part of a concat (the bias transformation's
// v): its slice of the gradient summed where it lies, one reduction.
TEMPLATE_TEST_CASE("sum_slice_to is a slice then a sum, bit for bit, in one call", "[tensor]",
                   float, double) {
  using counted = CountingBackend<cpu>;
  using C = Tensor<TestType, counted>;
  Generator gen(23);
  const C x = raw::normal<TestType>({3, 9, 11}, gen).template to<counted>();
  struct Case {
    int axis;
    std::int64_t start, length;
    Shape shape;
  };
  // A slice of rows wider than one (a contiguous inner run) and of one
  // column (rows of width 1: strided inner), summed over the points, the
  // tasks, or everything; its rows folding into shared outputs (the last
  // axis reduced) or not; a slice of the middle axis.
  for (const Case& k : {Case{2, 6, 5, {3, 1, 5}}, Case{2, 6, 5, {5}}, Case{2, 10, 1, {3, 1, 1}},
                        Case{2, 0, 3, {}}, Case{2, 2, 4, {3, 9, 1}}, Case{1, 2, 7, {1, 7, 11}},
                        Case{1, 4, 1, {3, 1, 1}}, Case{2, 6, 5, {3, 9, 5}}}) {
    CAPTURE(k.axis, k.start, k.length, k.shape);
    const C sliced = raw::slice(x, k.axis, k.start, k.length);
    const auto expected = raw::sum_to(sliced, k.shape).to_vector();
    counted::reset();
    const C y = raw::sum_slice_to(x, k.axis, k.start, k.length, k.shape);
    CHECK(counted::calls().total() == 1);
    CHECK(counted::calls()["reduce sum"] == 1);
    REQUIRE(y.shape() == k.shape);
    CHECK(y.to_vector() == expected);
  }
  CHECK_THROWS_WITH(raw::sum_slice_to(x, 2, 8, 5, Shape{3, 1, 5}),
                    Contains("sum_slice_to") && Contains("[8, 13)") && Contains("[3, 9, 11]"));
  CHECK_THROWS_WITH(raw::sum_slice_to(x, 2, 0, 5, Shape{3, 1, 4}),
                    Contains("sum_to") && Contains("[3, 1, 4]") && Contains("[3, 9, 5]"));
}

TEST_CASE("batched matmul matches a naive product with transposes and broadcasting", "[tensor]") {
  Generator gen(7);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const T a = raw::normal<double>(ta ? Shape{3, 1, 4, 2} : Shape{3, 1, 2, 4}, gen);
      const T b = raw::normal<double>(tb ? Shape{5, 3, 4} : Shape{5, 4, 3}, gen);
      const T c = raw::matmul(a, b, ta, tb);
      REQUIRE(c.shape() == Shape{3, 5, 2, 3});
      const auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector();
      for (int p = 0; p < 3; ++p)
        for (int q = 0; q < 5; ++q)
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j) {
              double expected = 0;
              for (int k = 0; k < 4; ++k) {
                const double aik = ta ? av[static_cast<std::size_t>(p * 8 + k * 2 + i)]
                                      : av[static_cast<std::size_t>(p * 8 + i * 4 + k)];
                const double bkj = tb ? bv[static_cast<std::size_t>(q * 12 + j * 4 + k)]
                                      : bv[static_cast<std::size_t>(q * 12 + k * 3 + j)];
                expected += aik * bkj;
              }
              CHECK(cv[static_cast<std::size_t>(((p * 5 + q) * 2 + i) * 3 + j)] ==
                    Approx(expected));
            }
    }
  CHECK_THROWS_WITH(raw::matmul(T::zeros({2, 3}), T::zeros({4, 5})),
                    Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
}

// cpu::gemm on the shapes a meta-step multiplies (10 points x 40 features,
// columns, rank-one products), every transpose, beta 0 and 1, batches with a
// shared operand, and one product too large for the small-matrix path
// (backend/cpu/small_gemm.hpp), against sums in double.
template <class V>
void check_gemm_against_naive_sums() {
  Generator gen(11);
  struct Dims {
    std::int64_t m, n, k;
  };
  for (const Dims d :
       {Dims{10, 40, 40}, Dims{40, 40, 10}, Dims{40, 1, 10}, Dims{10, 1, 40}, Dims{10, 40, 1},
        Dims{1, 40, 10}, Dims{1, 1, 5}, Dims{3, 7, 5}, Dims{300, 260, 240}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const V beta : {V(0), V(1)})
          for (const int shared : {0, 1, 2}) {  // none, A, B
            const std::int64_t batch = d.m * d.n * d.k > 1000000 ? 1 : 3;
            GemmLayout<V> g{.trans_a = ta,
                            .trans_b = tb,
                            .m = d.m,
                            .n = d.n,
                            .k = d.k,
                            .batch = batch,
                            .stride_a = shared == 1 ? 0 : d.m * d.k,
                            .stride_b = shared == 2 ? 0 : d.k * d.n,
                            .stride_c = d.m * d.n,
                            .beta = beta};
            const auto a = raw::normal<V>({batch, d.m * d.k}, gen).to_vector();
            const auto b = raw::normal<V>({batch, d.k * d.n}, gen).to_vector();
            const auto c0 = raw::normal<V>({batch, d.m * d.n}, gen).to_vector();
            auto c = c0;
            cpu::gemm(g, a.data(), b.data(), c.data());
            double worst = 0;
            for (std::int64_t p = 0; p < batch; ++p)
              for (std::int64_t i = 0; i < d.m; ++i)
                for (std::int64_t j = 0; j < d.n; ++j) {
                  const auto at = [&](std::int64_t r, std::int64_t col) {
                    return static_cast<std::size_t>(r * d.n + col + p * g.stride_c);
                  };
                  double sum = beta == V(1) ? double(c0[at(i, j)]) : 0.0, scale = std::abs(sum);
                  for (std::int64_t q = 0; q < d.k; ++q) {
                    const double x = a[static_cast<std::size_t>(p * g.stride_a +
                                                                (ta ? q * d.m + i : i * d.k + q))],
                                 y = b[static_cast<std::size_t>(p * g.stride_b +
                                                                (tb ? j * d.k + q : q * d.n + j))];
                    sum += x * y;
                    scale += std::abs(x * y);
                  }
                  worst = std::max(worst, std::abs(double(c[at(i, j)]) - sum) / (scale + 1e-30));
                }
            INFO(d.m << " x " << d.n << " x " << d.k << " trans " << ta << tb << " beta " << beta
                     << " shared " << shared);
            // The rounding bound of a k-term sum, relative to the sum of |terms|.
            CHECK(worst < double(d.k + 2) * std::numeric_limits<V>::epsilon());
          }
}

TEST_CASE("cpu::gemm matches sums in double on meta-step shapes, float and double", "[tensor]") {
  check_gemm_against_naive_sums<float>();
  check_gemm_against_naive_sums<double>();
}

TEST_CASE("the small-matrix path takes the products it is for", "[tensor]") {
  std::vector<float> a(10 * 40, 1.0f), b(40 * 40, 1.0f), c(10 * 40);
  GemmLayout<float> g{.m = 10, .n = 40, .k = 40};
  GemmLayout<float> scaled = g;
  scaled.alpha = 2;
  CHECK_FALSE(detail::cpu_small_gemm::small_gemm(scaled, a.data(), b.data(), c.data()));
#ifdef PLATIPUS_HAVE_LIBXSMM
  REQUIRE(detail::cpu_small_gemm::small_gemm(g, a.data(), b.data(), c.data()));
  CHECK(c == std::vector<float>(10 * 40, 40.0f));
#else
  CHECK_FALSE(detail::cpu_small_gemm::small_gemm(g, a.data(), b.data(), c.data()));
#endif
}

TEST_CASE("a batch times a shared matrix equals per-item products", "[tensor]") {
  Generator gen(3);
  const T a = raw::normal<double>({4, 5, 3}, gen), w = raw::normal<double>({3, 2}, gen);
  const T folded = raw::matmul(a, w);
  const T expanded = raw::matmul(a, raw::expand(w, {4, 3, 2}));
  const auto f = folded.to_vector(), e = expanded.to_vector();
  for (std::size_t i = 0; i < f.size(); ++i) CHECK(f[i] == Approx(e[i]));
}

TEST_CASE("layout kernels: transpose, slice, pad, concat, expand", "[tensor]") {
  const T x = iota({2, 3});
  CHECK(raw::transpose(x, 0, 1).to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(raw::slice(x, 1, 1, 2).to_vector() == std::vector<double>{1, 2, 4, 5});
  CHECK(raw::pad(raw::slice(x, 1, 1, 2), 1, 1, 3).to_vector() ==
        std::vector<double>{0, 1, 2, 0, 4, 5});
  const T y = iota({2, 1}, 9);
  const std::vector<const T*> parts{&x, &y};
  CHECK(raw::concat<double, cpu>(parts, 1).to_vector() ==
        std::vector<double>{0, 1, 2, 9, 3, 4, 5, 10});
  CHECK(raw::expand(y, {2, 3}).to_vector() == std::vector<double>{9, 9, 9, 10, 10, 10});
  CHECK_THROWS_WITH(raw::slice(x, 1, 2, 2), Contains("slice") && Contains("[2, 3]"));
  const std::vector<const T*> twice{&x, &x};
  CHECK_THROWS_WITH((raw::concat<double, cpu>(twice, 2)), Contains("concat"));
}

TEST_CASE("pad and concat write their blocks and zeros with one call per four blocks", "[tensor]") {
  using counted = CountingBackend<cpu>;
  using C = Tensor<double, counted>;
  const C x = iota({2, 2}).to<counted>();
  for (const std::int64_t start : {0, 1, 3}) {
    // The cached allocator hands pad the NaNs' buffer back: its zeros are
    // written, not assumed.
    { const C nans = C::full({2, 5}, std::nan("")); }
    counted::reset();
    const C y = raw::pad(x, 1, start, 5);
    CHECK(counted::calls().total() == 1);
    CHECK(counted::calls()["foreach_strided_copy"] == 1);
    const auto padded = y.to_vector();
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t j = 0; j < 5; ++j) {
        const bool inside = j >= start && j < start + 2;
        CHECK(padded[static_cast<std::size_t>(r * 5 + j)] ==
              (inside ? static_cast<double>(r * 2 + j - start) : 0.0));
      }
  }
  // Six parts, one of them broadcast along the rows: two calls.
  std::vector<C> parts;
  for (std::int64_t i = 0; i < 6; ++i)
    parts.push_back(iota({i == 2 ? 1 : 2, i + 1}, 10.0 * i).to<counted>());
  std::vector<const C*> pointers;
  for (const auto& part : parts) pointers.push_back(&part);
  counted::reset();
  const auto joined = raw::expand_concat(std::span<const C* const>(pointers), 1);
  CHECK(counted::calls()["foreach_strided_copy"] == 2);
  CHECK(counted::calls().total() == 2);
  REQUIRE(joined.shape() == Shape{2, 21});
  const auto got = joined.to_vector();
  std::size_t at = 0;
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < i + 1; ++j)
        CHECK(got[at++] == 10.0 * i + (i == 2 ? 0 : r * (i + 1)) + j);
}

TEST_CASE("expand_pad is expand then pad in one call, and names the shapes it cannot join",
          "[tensor]") {
  using counted = CountingBackend<cpu>;
  using C = Tensor<double, counted>;
  const C x = iota({2, 1, 3}).to<counted>();
  counted::reset();
  const C y = raw::expand_pad(x, -1, 2, Shape{2, 4, 7});
  CHECK(counted::calls().total() == 1);
  CHECK(y.to_vector() == raw::pad(raw::expand(x, {2, 4, 3}), -1, 2, 7).to_vector());
  CHECK_THROWS_WITH(raw::expand_pad(x, -1, 5, Shape{2, 4, 7}),
                    Contains("pad") && Contains("offset 5"));
  CHECK_THROWS_WITH(raw::expand_pad(x, -1, 0, Shape{3, 4, 7}),
                    Contains("pad") && Contains("[2, 1, 3]"));
}

TEST_CASE("gather and scatter_add are adjoint", "[tensor]") {
  const T x = iota({3, 2});
  const Index<> idx = Index<>::from_host({3}, {2, 0, 2});
  CHECK(raw::gather(x, 0, idx).to_vector() == std::vector<double>{4, 5, 0, 1, 4, 5});
  CHECK(raw::scatter_add(T::ones({3, 2}), 0, idx, 3).to_vector() ==
        std::vector<double>{1, 1, 0, 0, 2, 2});
  CHECK_THROWS_WITH(raw::gather(x, 0, Index<>::from_host({1}, {3})),
                    Contains("index_select") && Contains("3"));
}

// scatter_add writes its output whole (the CPU zeroes it a block of 4096
// elements at a time as the sums land): 3 x 10000 rows of 2, indices that
// descend, repeat, jump across blocks and return below them; and no index.
TEST_CASE("scatter_add writes zeros wherever no index lands, in any order of the indices",
          "[tensor]") {
  const std::int64_t extent = 10000;
  const std::vector<std::int64_t> where{9999, 5000, 5000, 17, 8000, 0, 4097, 9998};
  const auto count = static_cast<std::int64_t>(where.size());
  const Index<> idx = Index<>::from_host({count}, std::span<const std::int64_t>(where));
  const T g = iota({3, count, 2}, 1);
  const auto got = raw::scatter_add(g, 1, idx, extent).to_vector();
  std::vector<double> want(static_cast<std::size_t>(3 * extent * 2), 0.0);
  const auto from = g.to_vector();
  for (std::int64_t o = 0; o < 3; ++o)
    for (std::int64_t j = 0; j < count; ++j)
      for (std::int64_t i = 0; i < 2; ++i)
        want[static_cast<std::size_t>((o * extent + where[static_cast<std::size_t>(j)]) * 2 + i)] +=
            from[static_cast<std::size_t>((o * count + j) * 2 + i)];
  CHECK(got == want);
  const Index<> none = Index<>::from_host({0}, std::span<const std::int64_t>());
  CHECK(raw::scatter_add(T::ones({3, 0, 2}), 1, none, 5).to_vector() ==
        std::vector<double>(30, 0.0));
}

TEST_CASE("Philox 4x32-10 reproduces the Random123 known-answer vectors", "[random]") {
  CHECK(philox4x32_10(0, 0, 0) == PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull) ==
        PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  // counter (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), key (0xa4093822, 0x299f31d0)
  CHECK(philox4x32_10(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull) ==
        PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  // The batched rounds give each block's bits: 37 blocks (two batches of 16
  // and five alone) whose counters carry into their high word.
  const std::uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull,
                      counter = 0xffffffffull - 20;
  std::vector<PhiloxBlock> blocks(37);
  philox4x32_10_blocks(seed, counter, stream, 37, blocks.data());
  for (std::uint64_t j = 0; j < 37; ++j)
    CHECK(blocks[j] == philox4x32_10(seed, counter + j, stream));
  // Fills read element i from block i / per_block, lane i % per_block.
  Generator g(seed, stream);
  const auto f = raw::uniform<float>({1003}, g).to_vector();
  const auto d = raw::uniform<double>({1003}, g).to_vector();
  for (std::uint64_t i = 0; i < 1003; ++i) {
    CHECK(f[i] == PhiloxDraw<float>::uniform(philox4x32_10(seed, i / 4, stream), int(i % 4)));
    CHECK(d[i] ==
          PhiloxDraw<double>::uniform(philox4x32_10(seed, 251 + i / 2, stream), int(i % 2)));
  }
}

TEST_CASE("random fills are reproducible, advance, and have the right moments", "[random]") {
  Generator g1(42), g2(42);
  const auto a = raw::normal<float>({1000}, g1).to_vector();
  const auto b = raw::normal<float>({1000}, g2).to_vector();
  CHECK(a == b);
  Generator fresh(42);
  CHECK(raw::normal<float>({4}, g1).to_vector() != raw::normal<float>({4}, fresh).to_vector());
  Generator g3(1);
  const auto u = raw::uniform<double>({20000}, g3).to_vector();
  double mean = 0, var = 0;
  for (double v : u) {
    CHECK(v > 0.0);
    CHECK(v < 1.0);
    mean += v / 20000.0;
  }
  for (double v : u) var += (v - mean) * (v - mean) / 20000.0;
  CHECK(mean == Approx(0.5).margin(0.01));
  CHECK(var == Approx(1.0 / 12).margin(0.005));
  const auto z = raw::normal<double>({20000}, g3).to_vector();
  double zm = 0, zv = 0;
  for (double v : z) zm += v / 20000.0;
  for (double v : z) zv += (v - zm) * (v - zm) / 20000.0;
  CHECK(zm == Approx(0.0).margin(0.03));
  CHECK(zv == Approx(1.0).margin(0.04));
}

TEST_CASE("a fill reads blocks by element index, so a prefix of a fill is a shorter fill",
          "[random]") {
  Generator g1(9), g2(9);
  const auto long_fill = raw::normal<float>({10}, g1).to_vector();
  const auto short_fill = raw::normal<float>({6}, g2).to_vector();
  for (std::size_t i = 0; i < short_fill.size(); ++i) CHECK(long_fill[i] == short_fill[i]);
}
