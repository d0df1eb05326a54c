// Pointer attribute answers for optimize mode's pinning, against the
// simulated driver: memory registered behind the program's back must answer
// exactly as pageable memory the driver never saw, and a pool block as a
// dedicated allocation.
#include "shim/hooks/pointer_attributes.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace pinshim {
namespace {

using PointerAttributesTest = fakecuda_test::DriverTest;

constexpr size_t kBytes = 1 << 20;
constexpr int kLastKnown = CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE;

// Output space for one attribute, filled with a recognizable pattern so that
// bytes written and bytes left alone both show in a comparison.
struct Out {
  unsigned char bytes[32];
  Out() { memset(bytes, 0x5A, sizeof(bytes)); }
};

std::vector<CUpointer_attribute> Attributes(bool with_p2p) {
  std::vector<CUpointer_attribute> all;
  for (int a = CU_POINTER_ATTRIBUTE_CONTEXT; a <= kLastKnown; ++a) {
    if (a == CU_POINTER_ATTRIBUTE_P2P_TOKENS && !with_p2p) continue;
    all.push_back(static_cast<CUpointer_attribute>(a));
  }
  return all;
}

size_t IndexOf(const std::vector<CUpointer_attribute>& all, CUpointer_attribute a) {
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == a) return i;
  }
  ADD_FAILURE() << "attribute " << a << " not asked";
  return 0;
}

// Registered (as the registration cache does) and plain pageable buffers.
class Buffers {
 public:
  Buffers() : registered_(malloc(kBytes)), pageable_(malloc(kBytes)) {
    EXPECT_EQ(cuMemHostRegister(registered_, kBytes, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  }
  ~Buffers() {
    EXPECT_EQ(cuMemHostUnregister(registered_), CUDA_SUCCESS);
    free(registered_);
    free(pageable_);
  }
  CUdeviceptr registered(size_t offset = 64) const {
    return reinterpret_cast<CUdeviceptr>(registered_) + offset;
  }
  CUdeviceptr pageable(size_t offset = 64) const {
    return reinterpret_cast<CUdeviceptr>(pageable_) + offset;
  }

 private:
  void* registered_;
  void* pageable_;
};

struct Answer {
  CUresult result;
  std::vector<Out> outs;
};

// cuPointerGetAttributes through `fn` (the driver's, or the pageable answer
// for registered memory).
template <typename Fn>
Answer AskAll(Fn fn, std::vector<CUpointer_attribute> attributes, CUdeviceptr ptr,
              int null_at = -1) {
  Answer a;
  a.outs.resize(attributes.size());
  std::vector<void*> data;
  for (size_t i = 0; i < attributes.size(); ++i) {
    data.push_back(static_cast<int>(i) == null_at ? nullptr : a.outs[i].bytes);
  }
  a.result = fn(static_cast<unsigned>(attributes.size()), attributes.data(), data.data(), ptr);
  return a;
}

CUresult HiddenAll(unsigned n, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  return PageablePointerGetAttributes(&cuPointerGetAttributes, n, attributes, data, ptr);
}

// The same answers, except that the host pointer is each query's own
// pointer (what the driver answers for memory it does not know).
void ExpectSameAnswer(const Answer& hidden, const Answer& pageable,
                      const std::vector<CUpointer_attribute>& attributes, CUdeviceptr hidden_ptr,
                      CUdeviceptr pageable_ptr) {
  ASSERT_EQ(hidden.result, pageable.result);
  ASSERT_EQ(hidden.outs.size(), pageable.outs.size());
  for (size_t i = 0; i < hidden.outs.size(); ++i) {
    if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
      uintptr_t h, p;
      memcpy(&h, hidden.outs[i].bytes, sizeof(h));
      memcpy(&p, pageable.outs[i].bytes, sizeof(p));
      EXPECT_EQ(h, hidden_ptr) << "attribute #" << i;
      EXPECT_EQ(p, pageable_ptr) << "attribute #" << i;
      continue;
    }
    EXPECT_EQ(memcmp(hidden.outs[i].bytes, pageable.outs[i].bytes, sizeof(Out)), 0)
        << "attribute #" << i;
  }
}

TEST_F(PointerAttributesTest, RegisteredMemoryIsPinnedToTheDriver) {
  Buffers b;
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b.registered()),
            CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_HOST);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b.pageable()),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(PointerAttributesTest, SingleAttributeAnswersAsPageable) {
  Buffers b;
  for (int a = 0; a <= kLastKnown + 2; ++a) {
    SCOPED_TRACE(a);
    const auto attribute = static_cast<CUpointer_attribute>(a);
    Out hidden, pageable;
    EXPECT_EQ(PageablePointerGetAttribute(&cuPointerGetAttribute, hidden.bytes, attribute,
                                          b.registered()),
              cuPointerGetAttribute(pageable.bytes, attribute, b.pageable()));
    EXPECT_EQ(memcmp(hidden.bytes, pageable.bytes, sizeof(Out)), 0);
    EXPECT_EQ(
        PageablePointerGetAttribute(&cuPointerGetAttribute, nullptr, attribute, b.registered()),
        cuPointerGetAttribute(nullptr, attribute, b.pageable()));
  }
}

TEST_F(PointerAttributesTest, ErrorsThatDoNotDependOnThePointerAreTheDrivers) {
  Buffers b;
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  CUdeviceptr hidden = 0, pageable = 0;
  const CUresult expected =
      cuPointerGetAttribute(&pageable, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, b.pageable());
  EXPECT_EQ(expected, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(PageablePointerGetAttribute(&cuPointerGetAttribute, &hidden,
                                        CU_POINTER_ATTRIBUTE_DEVICE_POINTER, b.registered()),
            expected);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
}

TEST_F(PointerAttributesTest, AllAttributesAnswerAsPageable) {
  Buffers b;
  const std::vector<CUpointer_attribute> attrs = Attributes(false);
  Answer pageable = AskAll(&cuPointerGetAttributes, attrs, b.pageable());
  EXPECT_EQ(pageable.result, CUDA_SUCCESS);
  ExpectSameAnswer(AskAll(&HiddenAll, attrs, b.registered()), pageable, attrs, b.registered(),
                   b.pageable());
  // The driver's answer for the same registered memory differs (it is pinned).
  Answer driver = AskAll(&cuPointerGetAttributes, attrs, b.registered());
  EXPECT_EQ(driver.result, CUDA_SUCCESS);
  unsigned type;
  memcpy(&type, driver.outs[IndexOf(attrs, CU_POINTER_ATTRIBUTE_MEMORY_TYPE)].bytes, sizeof(type));
  EXPECT_EQ(type, CU_MEMORYTYPE_HOST);
  int ordinal;
  memcpy(&ordinal, pageable.outs[IndexOf(attrs, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)].bytes,
         sizeof(ordinal));
  EXPECT_EQ(ordinal, CU_DEVICE_INVALID);
}

TEST_F(PointerAttributesTest, ManyAttributesAreAskedInGroups) {
  Buffers b;
  std::vector<CUpointer_attribute> many;
  while (many.size() < 70) {
    for (CUpointer_attribute a : Attributes(false)) many.push_back(a);
  }
  ExpectSameAnswer(AskAll(&HiddenAll, many, b.registered()),
                   AskAll(&cuPointerGetAttributes, many, b.pageable()), many, b.registered(),
                   b.pageable());
}

TEST_F(PointerAttributesTest, BadArgumentsGetTheDriversError) {
  Buffers b;
  // An attribute the driver refuses, a null output, no attributes at all.
  Answer with_p2p = AskAll(&cuPointerGetAttributes, Attributes(true), b.pageable());
  EXPECT_NE(with_p2p.result, CUDA_SUCCESS);
  EXPECT_EQ(AskAll(&HiddenAll, Attributes(true), b.registered()).result, with_p2p.result);
  Answer null_out = AskAll(&cuPointerGetAttributes, Attributes(false), b.pageable(), 3);
  EXPECT_NE(null_out.result, CUDA_SUCCESS);
  EXPECT_EQ(AskAll(&HiddenAll, Attributes(false), b.registered(), 3).result, null_out.result);
  EXPECT_EQ(AskAll(&HiddenAll, {}, b.registered()).result,
            AskAll(&cuPointerGetAttributes, {}, b.pageable()).result);
  // A failed call leaves nothing about the pinned memory behind.
  Answer failed = AskAll(&HiddenAll, Attributes(true), b.registered());
  for (const Out& o : failed.outs) EXPECT_EQ(memcmp(o.bytes, Out().bytes, sizeof(Out)), 0);
}

// A driver that writes its booleans as one byte: the pageable answer is
// written at that width, so the program's neighbouring bytes stay untouched.
CUresult OneByteBooleans(unsigned n, CUpointer_attribute* attributes, void** data, CUdeviceptr) {
  for (unsigned i = 0; i < n; ++i) {
    if (attributes[i] != CU_POINTER_ATTRIBUTE_MAPPED) return CUDA_ERROR_INVALID_VALUE;
    *static_cast<unsigned char*>(data[i]) = 1;
  }
  return CUDA_SUCCESS;
}

TEST(PointerAttributesWidthTest, BooleansTakeTheDriversWidth) {
  CUpointer_attribute mapped = CU_POINTER_ATTRIBUTE_MAPPED;
  unsigned char out[4] = {7, 7, 7, 7};
  void* data = out;
  ASSERT_EQ(PageablePointerGetAttributes(&OneByteBooleans, 1, &mapped, &data, 0x1000),
            CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 7);
  EXPECT_EQ(out[3], 7);
}

TEST_F(PointerAttributesTest, PoolBlockAnswersAsADedicatedAllocation) {
  void* slab = nullptr;
  void* dedicated = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&slab, 2 << 20, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&dedicated, 1000, 0), CUDA_SUCCESS);
  BlockAttributes block;
  block.base = reinterpret_cast<uintptr_t>(slab) + (64 << 10);
  block.bytes = 1000;
  block.buffer_id = PoolBufferId(7);

  std::vector<CUpointer_attribute> attrs = Attributes(false);
  Answer in_block = AskAll(&cuPointerGetAttributes, attrs, block.base + 10);
  ASSERT_EQ(in_block.result, CUDA_SUCCESS);
  std::vector<void*> data;
  for (Out& o : in_block.outs) data.push_back(o.bytes);
  RewriteForBlock(block, static_cast<unsigned>(attrs.size()), attrs.data(), data.data());
  Answer own =
      AskAll(&cuPointerGetAttributes, attrs, reinterpret_cast<CUdeviceptr>(dedicated) + 10);
  ASSERT_EQ(own.result, CUDA_SUCCESS);

  for (size_t i = 0; i < attrs.size(); ++i) {
    SCOPED_TRACE(attrs[i]);
    CUdeviceptr start;
    size_t size;
    unsigned long long id;
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        memcpy(&start, in_block.outs[i].bytes, sizeof(start));
        EXPECT_EQ(start, block.base);
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        memcpy(&size, in_block.outs[i].bytes, sizeof(size));
        EXPECT_EQ(size, 1000u);
        EXPECT_EQ(memcmp(in_block.outs[i].bytes, own.outs[i].bytes, sizeof(Out)), 0);
        break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        memcpy(&id, in_block.outs[i].bytes, sizeof(id));
        EXPECT_EQ(id, PoolBufferId(7));
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: break;  // the pointer itself
      default:  // everything else: what the dedicated allocation answers
        EXPECT_EQ(memcmp(in_block.outs[i].bytes, own.outs[i].bytes, sizeof(Out)), 0);
    }
  }
  // The single-attribute form.
  CUdeviceptr start = 0;
  ASSERT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, block.base + 10),
            CUDA_SUCCESS);
  EXPECT_EQ(start, reinterpret_cast<CUdeviceptr>(slab));
  RewriteForBlock(block, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, &start);
  EXPECT_EQ(start, block.base);
  EXPECT_EQ(cuMemFreeHost(dedicated), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(slab), CUDA_SUCCESS);
}

TEST(PoolBufferIdTest, DistinctAndApartFromTheDriversIds) {
  EXPECT_NE(PoolBufferId(1), PoolBufferId(2));
  EXPECT_GE(PoolBufferId(1), uint64_t{1} << 63);
  EXPECT_NE(PoolBufferId(1), 1u);
}

}  // namespace
}  // namespace pinshim
