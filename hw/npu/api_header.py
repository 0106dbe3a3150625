"""``kernel_operator.h`` for the syntax check: the declarations of the Ascend C API of the
A2 generation (``__NPU_ARCH__`` 2201) that the printer uses, each with the signature of
the public asc-devkit header it comes from (named in a comment; the CANN open-source
``asc-devkit`` repository, ``include/basic_api/`` and ``impl/basic_api/``), so that
``g++ -fsyntax-only`` checks every emitted kernel's calls: names, argument counts,
parameter structs and their field counts, template arguments, enum values.

Not a copy of those headers: only the declarations (no definitions), reduced to the
overloads the printer uses, with the attribute macros (``__aicore__``,
``__inout_pipe__``...) defined empty and ``inline`` left out (declarations only);
``half`` is a stand-in class (a builtin type of the Bisheng compiler).  Compiler
builtins the headers rely on (``pipe_t``, ``QuantMode_t``) are declared as the docs
list them.

The file is compiled twice: once as the host sees it (the tiling function) and once
with ``__NPU_ARCH__`` defined to 2201 (the kernel)."""

HEADER = r"""#pragma once
#include <cstdint>
#include <cstddef>
#include <algorithm>
#include <type_traits>
// ---- compiler / macro layer (impl/basic_api/kernel_macros.h, impl/utils/sys_macros.h)
#define __aicore__
#define __global__
#define __gm__
#ifndef __NPU_ARCH__
#define __ASC_HOST_CHECK__ 1
#endif
typedef uint8_t* GM_ADDR;                                        // kernel_macros.h
// KERNEL_TASK_TYPE_DEFAULT: impl/basic_api/utils/kernel_utils_macros.h
enum KernelMetaType { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIV_1_0,
                      KERNEL_TYPE_MIX_AIC_1_0, KERNEL_TYPE_MIX_AIC_1_1, KERNEL_TYPE_MIX_AIC_1_2,
                      KERNEL_TYPE_AICORE, KERNEL_TYPE_VECTORCORE, KERNEL_TYPE_MIX_AICORE,
                      KERNEL_TYPE_MIX_VECTOR_CORE, KERNEL_TYPE_MAX };
#define KERNEL_TASK_TYPE_DEFAULT(value) static_assert((value) < KERNEL_TYPE_MAX, "kernel type")
// GET_TILING_DATA_WITH_STRUCT(struct_name, tiling_data, tiling_arg): docs Kernel-Tiling;
// the tiling struct is read from the kernel's __gm__ tiling argument
#define GET_TILING_DATA_WITH_STRUCT(S, var, arg) \
    const S var = *reinterpret_cast<__gm__ const S*>(arg)
// pipe_t: a compiler builtin (tools/build/asc_op_compile_base/c_api/asc_platform.h)
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
// QuantMode_t: a compiler builtin (docs: Fixpipe, quantPre)
enum QuantMode_t { NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE,
                   REQ8, VREQ8 };
struct half {                                    // stand-in for the builtin half type
    half() = default;
    half(float v);
    operator float() const;
    uint16_t bits;
};
struct bfloat16_t {                              // stand-in for the builtin bfloat16_t
    bfloat16_t() = default;
    bfloat16_t(float v);
    operator float() const;
    uint16_t bits;
};
namespace AscendC {
// impl/utils/sys_macros.h: ASCEND_IS_AIC / ASCEND_IS_AIV
enum CoreType { AIC, AIV };
#ifdef __CHECK_AIV__
constexpr CoreType g_coreType = AIV;
#else
constexpr CoreType g_coreType = AIC;
#endif
#define ASCEND_IS_AIC constexpr(g_coreType == AscendC::AIC)
#define ASCEND_IS_AIV constexpr(g_coreType == AscendC::AIV)
// impl/basic_api/common_types.h
enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC,
                                 LCM = VECCALC, SPM, SHM = SPM, TSCM, C2PIPE2GM, C2PIPE2LOCAL,
                                 MAX };
// impl/basic_api/kernel_event.h (HardEvent; FIX_V / V_FIX only for __NPU_ARCH__ 5102/3003)
enum class HardEvent : uint8_t { MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V,
    V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M,
    MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S,
    M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX };
// impl/basic_api/utils/kernel_utils_mode.h
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND,
                                 CAST_TRUNC, CAST_ODD, UNKNOWN = 0xFF };
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE,
                               VSEL_TENSOR_TENSOR_MODE };
enum class ReduceOrder : uint8_t { ORDER_VALUE_INDEX = 0, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE,
                                   ORDER_ONLY_INDEX };
// impl/utils/common_types.h
enum class ReduceType { NONE = -1, SUM = 0, MAX, MIN };

// ---- tensors: include/basic_api/kernel_tensor.h
template <typename T> class LocalTensor {
public:
    __aicore__ inline LocalTensor() {}
    __aicore__ LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize);
    __aicore__ LocalTensor operator[](const uint32_t offset) const;
    __aicore__ uint64_t GetPhyAddr() const;
};
template <typename T> class GlobalTensor {
public:
    __aicore__ void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize);
    __aicore__ GlobalTensor operator[](const uint64_t offset) const;
};

// ---- parameter structs (A2 field types)
// include/basic_api/kernel_struct_data_copy.h
struct DataCopyExtParams {
    __aicore__ DataCopyExtParams() {}
    __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len,
                                 const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                                 const uint32_t rsvIn);
    uint16_t blockCount = 1; uint32_t blockLen = 0; uint32_t srcStride = 0;
    uint32_t dstStride = 0; uint32_t rsv = 0;
};
template <typename T> struct DataCopyPadExtParams {
    __aicore__ DataCopyPadExtParams() {}
    __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue,
                                    const uint8_t rightPadValue, T padValue);
    bool isPad = false; uint8_t leftPadding = 0; uint8_t rightPadding = 0; T paddingValue;
};
struct Nd2NzParams {
    __aicore__ Nd2NzParams() {}
    __aicore__ Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn,
                           const uint16_t dValueIn, const uint16_t srcNdMatrixStrideIn,
                           const uint16_t srcDValueIn, const uint16_t dstNzC0StrideIn,
                           const uint16_t dstNzNStrideIn, const uint16_t dstNzMatrixStrideIn);
    uint16_t ndNum = 0; uint16_t nValue = 0; uint16_t dValue = 0; uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0; uint16_t dstNzC0Stride = 0; uint16_t dstNzNStride = 0;
    uint16_t dstNzMatrixStride = 0;
};
struct DataCopyParams {
    __aicore__ DataCopyParams() {}
    __aicore__ DataCopyParams(const uint16_t count, const uint16_t len,
                              const uint16_t srcStrideIn, const uint16_t dstStrideIn);
    uint16_t blockCount = 1; uint16_t blockLen = 0; uint16_t srcGap = 0; uint16_t dstGap = 0;
};
// include/basic_api/kernel_struct_mm.h
struct LoadData2DParams {
    __aicore__ LoadData2DParams() {}
    __aicore__ LoadData2DParams(const uint16_t startIndexIn, const uint8_t repeatTimesIn,
                                const uint16_t srcStrideIn, const uint8_t sidIn,
                                const uint16_t dstGapIn, const bool ifTransposeIn,
                                const uint8_t addrModeIn);
    uint16_t startIndex = 0; uint16_t dstGap = 0; uint16_t srcStride = 0; bool ifTranspose = 0;
    uint8_t repeatTimes = 0; uint8_t sid = 0; uint8_t addrMode = 0;
};
struct LoadData2dTransposeParams {
    __aicore__ LoadData2dTransposeParams() {}
    __aicore__ LoadData2dTransposeParams(const uint16_t startIndexIn, const uint8_t repeatTimesIn,
                                         const uint16_t srcStrideIn, const uint16_t dstGapIn,
                                         const uint16_t dstfracGapIn, const uint8_t addrModeIn);
    uint16_t startIndex = 0; uint8_t repeatTimes = 0; uint16_t srcStride = 0;
    uint16_t dstGap = 0; uint16_t dstFracGap = 0; uint8_t addrMode = 0;
};
constexpr int32_t PAD_SIZE = 4;                  // impl/basic_api/utils/kernel_utils_constants.h
template <typename T> struct LoadData3DParamsV2 {
    __aicore__ LoadData3DParamsV2() {}
    __aicore__ LoadData3DParamsV2(const uint8_t padListIn[PAD_SIZE], const uint16_t l1HIn,
        const uint16_t l1WIn, const uint16_t channelSizeIn, const uint16_t kExtensionIn,
        const uint16_t mExtensionIn, const uint16_t kStartPtIn, const uint16_t mStartPtIn,
        const uint8_t strideWIn, const uint8_t strideHIn, const uint8_t filterWIn,
        const uint8_t filterHIn, const uint8_t dilationFilterWIn,
        const uint8_t dilationFilterHIn, const bool enTransposeIn, const bool enSmallKIn,
        const T padValueIn);
};
struct MmadParams {
    __aicore__ MmadParams() {}
    __aicore__ MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn,
                          const bool isBiasIn, const int32_t fmOffsetIn, const bool enSsparseIn,
                          const bool enWinogradAIn, const bool enWinogradBIn);
    __aicore__ MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn,
                          const uint8_t unitFlagIn, const bool cmatrixSourceIn,
                          const bool cmatrixInitValIn);
    uint16_t m = 0; uint16_t n = 0; uint16_t k = 0; bool isBias = false; int32_t fmOffset = 0;
    bool enSsparse = false; bool enWinogradA = false; bool enWinogradB = false;
    uint8_t unitFlag = 0; bool kDirectionAlign = false; bool cmatrixSource = false;
    bool cmatrixInitVal = true;
};
// include/basic_api/kernel_struct_fixpipe.h
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
    CO2Layout format;
    __aicore__ constexpr inline FixpipeConfig(CO2Layout format_) : format(format_) {}
};
constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
struct FixpipeParamsV220 {
    __aicore__ FixpipeParamsV220() {}
    __aicore__ FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn,
                                 const uint16_t srcStrideIn, const uint32_t dstStrideIn,
                                 const bool reluEnIn);
    __aicore__ FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn,
                                 const uint16_t srcStrideIn, const uint32_t dstStrideIn,
                                 const bool reluEnIn, const QuantMode_t quantPreIn,
                                 const int64_t deqScalarIn, const uint16_t ndNumIn,
                                 const uint16_t srcNdStrideIn, const uint16_t dstNdStrideIn,
                                 const uint8_t unitFlagIn);
    uint16_t nSize = 0; uint16_t mSize = 0; uint16_t srcStride = 0; uint32_t dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant; uint64_t deqScalar; uint16_t ndNum = 1;
    uint16_t srcNdStride = 0; uint16_t dstNdStride = 0; bool reluEn = false;
    uint8_t unitFlag = 0; bool isChannelSplit = false;
};
// include/basic_api/kernel_struct_binary.h, kernel_struct_unary.h, kernel_struct_brcb.h
struct BinaryRepeatParams {
    __aicore__ BinaryRepeatParams() {}
    __aicore__ BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn,
                                  const uint8_t src1BlkStrideIn, const uint8_t dstRepStrideIn,
                                  const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn);
};
struct UnaryRepeatParams {
    __aicore__ UnaryRepeatParams() {}
    __aicore__ UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn,
                                 const uint8_t dstRepStrideIn, const uint8_t srcRepStrideIn);
};
struct BrcbRepeatParams {
    __aicore__ BrcbRepeatParams() {}
    __aicore__ BrcbRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t dstRepStrideIn);
};
// include/basic_api/kernel_struct_transpose.h
constexpr int32_t NCHW_CONV_ADDR_LIST_SIZE = 16;
struct TransDataTo5HDParams {
    constexpr __aicore__ TransDataTo5HDParams() = default;
    constexpr __aicore__ TransDataTo5HDParams(const bool dstHighHalfIn, const bool srcHighHalfIn,
        const uint8_t repeatTimesIn, const uint16_t dstRepStrideIn,
        const uint16_t srcRepStrideIn)
        : dstHighHalf(dstHighHalfIn), srcHighHalf(srcHighHalfIn), repeatTimes(repeatTimesIn),
          dstRepStride(dstRepStrideIn), srcRepStride(srcRepStrideIn) {}
    bool dstHighHalf = false; bool srcHighHalf = false; uint8_t repeatTimes = 1;
    uint16_t dstRepStride = 0; uint16_t srcRepStride = 0;
};

// ---- data movement: include/basic_api/kernel_operator_data_copy_intf.h
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst,
    const GlobalTensor<T>& src, const Nd2NzParams& intriParams);
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst,
    const GlobalTensor<T>& src, const DataCopyParams& intriParams);
template <typename T> __aicore__ void DataCopyPad(const LocalTensor<T>& dst,
    const GlobalTensor<T>& src, const DataCopyExtParams& dataCopyParams,
    const DataCopyPadExtParams<T>& padParams);
template <typename T> __aicore__ void DataCopyPad(const GlobalTensor<T>& dst,
    const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams);
// ---- cube: include/basic_api/kernel_operator_mm_intf.h
template <typename T> __aicore__ void LoadData(const LocalTensor<T>& dst,
    const LocalTensor<T>& src, const LoadData2DParams& loadDataParams);
template <typename T> __aicore__ void LoadData(const LocalTensor<T>& dst,
    const LocalTensor<T>& src, const LoadData3DParamsV2<T>& loadDataParams);
template <typename T> __aicore__ void LoadDataWithTranspose(const LocalTensor<T>& dst,
    const LocalTensor<T>& src, const LoadData2dTransposeParams& loadDataParams);
// the type combinations of __NPU_ARCH__ 2201 (impl/basic_api/dav_c220/
// kernel_operator_mm_impl.h, MmadCal's SupportType check; int4b_t left out)
template <typename T, typename U, typename S> struct PcMmadTypes { static constexpr bool ok =
    (std::is_same<T, int32_t>::value && std::is_same<U, int8_t>::value &&
     std::is_same<S, int8_t>::value) ||
    (std::is_same<T, float>::value && std::is_same<U, S>::value &&
     (std::is_same<U, half>::value || std::is_same<U, float>::value ||
      std::is_same<U, bfloat16_t>::value)); };
template <typename T, typename U, typename S,
          typename = typename std::enable_if<PcMmadTypes<T, U, S>::ok>::type>
__aicore__ void Mmad(
    const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter,
    const MmadParams& mmadParams);
// include/basic_api/kernel_operator_fixpipe_intf.h (__NPU_ARCH__ 2201: L0C -> GM)
// the (src, dst) types of the L0C -> GM form on 2201 (impl/basic_api/dav_c220/
// kernel_operator_fixpipe_impl.h, FixpipeL0C2GMCal's SupportType check)
template <typename U, typename T> struct PcFixpipeTypes { static constexpr bool ok =
    (std::is_same<U, float>::value && (std::is_same<T, int8_t>::value ||
      std::is_same<T, uint8_t>::value || std::is_same<T, half>::value ||
      std::is_same<T, bfloat16_t>::value || std::is_same<T, float>::value)) ||
    (std::is_same<U, int32_t>::value && (std::is_same<T, int8_t>::value ||
      std::is_same<T, uint8_t>::value || std::is_same<T, half>::value ||
      std::is_same<T, int32_t>::value)); };
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR,
          typename = typename std::enable_if<PcFixpipeTypes<U, T>::ok>::type>
__aicore__ void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src,
                               const FixpipeParamsV220& intriParams);
// the same file, "L0C->GM deq tensor quant": the per-channel quantisation parameters
// (uint64_t, in L1) for quantPre VDEQF16 / VQF322B8_PRE / VREQ8; the (src, dst) type
// check as above (impl/basic_api/dav_c220/kernel_operator_fixpipe_v2_impl.h)
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR,
          typename S = uint64_t,
          typename std::enable_if<std::is_same<S, uint64_t>::value, bool>::type = true,
          typename = typename std::enable_if<PcFixpipeTypes<U, T>::ok>::type>
__aicore__ void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src,
                        const LocalTensor<S>& cbufWorkspace,
                        const FixpipeParamsV220& intriParams);
// include/basic_api/kernel_operator_set_atomic_intf.h: later GM writes add to what GM
// holds (a split-K part's Fixpipe) until SetAtomicNone
template <typename T> __aicore__ void SetAtomicAdd();
__aicore__ void SetAtomicNone();

// ---- vector: first-n and repeat forms (mask continuous mode)
// include/basic_api/kernel_operator_vec_binary_intf.h
#define ASC_BINARY(NAME) \
template <typename T> __aicore__ void NAME(const LocalTensor<T>& dst, \
    const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count); \
template <typename T, bool isSetMask = true> __aicore__ void NAME( \
    const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, \
    uint64_t mask, const uint8_t repeatTime, const BinaryRepeatParams& repeatParams);
ASC_BINARY(Add) ASC_BINARY(Sub) ASC_BINARY(Mul) ASC_BINARY(Div) ASC_BINARY(Max) ASC_BINARY(Min)
// same file: FusedMulAdd (dst = src0 * dst + src1), the binary signatures
ASC_BINARY(FusedMulAdd)
// include/basic_api/kernel_operator_vec_binary_scalar_intf.h
#define ASC_SCALAR(NAME) \
template <typename T, bool isSetMask = true> __aicore__ void NAME( \
    const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, \
    const int32_t& count); \
template <typename T, bool isSetMask = true> __aicore__ void NAME( \
    const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask, \
    const uint8_t repeatTime, const UnaryRepeatParams& repeatParams);
ASC_SCALAR(Adds) ASC_SCALAR(Muls) ASC_SCALAR(Maxs) ASC_SCALAR(Mins)
// include/basic_api/kernel_operator_vec_unary_intf.h
#define ASC_UNARY(NAME) \
template <typename T> __aicore__ void NAME(const LocalTensor<T>& dst, \
    const LocalTensor<T>& src, const int32_t& count); \
template <typename T, bool isSetMask = true> __aicore__ void NAME( \
    const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask, \
    const uint8_t repeatTime, const UnaryRepeatParams& repeatParams);
ASC_UNARY(Exp) ASC_UNARY(Ln) ASC_UNARY(Abs) ASC_UNARY(Sqrt) ASC_UNARY(Rsqrt)
ASC_UNARY(Reciprocal) ASC_UNARY(Relu)
// include/basic_api/kernel_operator_vec_vconv_intf.h; the (src, dst) pairs of the A2
// table in the docs (docs/zh/api/SIMD-API/.../类型转换/Cast.md; int4b_t left out): no
// float -> int8_t, for one
template <typename S, typename D> struct PcCastTypes { template <typename A, typename B>
    static constexpr bool is = std::is_same<S, A>::value && std::is_same<D, B>::value;
    static constexpr bool ok = is<int8_t, half> || is<uint8_t, half> || is<int16_t, half> ||
    is<int16_t, float> || is<half, int8_t> || is<half, uint8_t> || is<half, int16_t> ||
    is<half, int32_t> || is<half, float> || is<bfloat16_t, int32_t> ||
    is<bfloat16_t, float> || is<int32_t, int16_t> || is<int32_t, half> ||
    is<int32_t, float> || is<int32_t, int64_t> || is<float, int16_t> || is<float, half> ||
    is<float, bfloat16_t> || is<float, int32_t> || is<float, float> ||
    is<float, int64_t> || is<int64_t, int32_t> || is<int64_t, float>; };
template <typename T, typename U,
          typename = typename std::enable_if<PcCastTypes<U, T>::ok>::type>
__aicore__ void Cast(const LocalTensor<T>& dst,
    const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count);
template <typename T, typename U, bool isSetMask = true,
          typename = typename std::enable_if<PcCastTypes<U, T>::ok>::type>
__aicore__ void Cast(
    const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
    const uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& repeatParams);
// include/basic_api/kernel_operator_vec_duplicate_intf.h
template <typename T> __aicore__ void Duplicate(const LocalTensor<T>& dst,
    const T& scalarValue, const int32_t& count);
// include/basic_api/kernel_operator_vec_brcb_intf.h
template <typename T> __aicore__ void Brcb(const LocalTensor<T>& dst,
    const LocalTensor<T>& src, const uint8_t repeatTime, const BrcbRepeatParams& repeatParams);
// include/basic_api/kernel_operator_vec_cmpsel_intf.h
template <typename T, typename U> __aicore__ void Compare(const LocalTensor<U>& dst,
    const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode, uint32_t count);
template <typename T, typename U> __aicore__ void Compares(const LocalTensor<U>& dst,
    const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode, uint32_t count);
template <typename T, typename U> __aicore__ void Select(const LocalTensor<T>& dst,
    const LocalTensor<U>& selMask, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
    SELMODE selMode, uint32_t count);
template <typename T, typename U> __aicore__ void Select(const LocalTensor<T>& dst,
    const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1, SELMODE selMode,
    uint32_t count);
// include/basic_api/kernel_operator_vec_reduce_intf.h
template <ReduceType reduceType, typename T, typename U, bool isSetMask = true>
__aicore__ void ReduceRepeat(const LocalTensor<T>& dst, const LocalTensor<U>& src,
    const int32_t mask, const int32_t repeatTime, const int32_t dstRepStride,
    const int32_t srcBlkStride, const int32_t srcRepStride,
    ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX);
// include/basic_api/kernel_operator_vec_transpose_intf.h
template <typename T> __aicore__ void TransDataTo5HD(
    const LocalTensor<T> (&dstList)[NCHW_CONV_ADDR_LIST_SIZE],
    const LocalTensor<T> (&srcList)[NCHW_CONV_ADDR_LIST_SIZE],
    const TransDataTo5HDParams& nchwconvParams);

// ---- synchronisation: include/basic_api/kernel_operator_block_sync_intf.h
template <HardEvent event> __aicore__ void SetFlag(int32_t eventID);
template <HardEvent event> __aicore__ void WaitFlag(int32_t eventID);
template <pipe_t pipe> __aicore__ void PipeBarrier();
template <uint8_t modeId, pipe_t pipe> __aicore__ void CrossCoreSetFlag(uint16_t flagId);
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
__aicore__ void CrossCoreWaitFlag(uint16_t flagId);
// ---- system: include/basic_api/kernel_operator_sys_var_intf.h,
// kernel_operator_common_intf.h, impl/basic_api/dav_c220/kernel_operator_common_impl.h
__aicore__ int64_t GetBlockNum();
__aicore__ int64_t GetBlockIdx();
__aicore__ int64_t GetSubBlockIdx();
__aicore__ int64_t GetTaskRatio();
__aicore__ void InitSocState();
__aicore__ GM_ADDR GetUserWorkspace(GM_ADDR workspace);
}  // namespace AscendC
"""
