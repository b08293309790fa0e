"""The operations TF.js 4.22's graph executor runs (``@tensorflow/tfjs-converter``'s op lists, by family): a
TF.js graph model whose nodes name anything else is refused before it reaches the browser. Copied from
``dist/operations/op_list/*.js`` of tfjs-converter 4.22.0 (regenerate from a newer release when the pin moves)."""
from __future__ import annotations

#: family -> op names (the file of tfjs-converter's op list they come from)
FAMILIES: dict[str, tuple[str, ...]] = {
    "arithmetic": ("Add", "AddN", "AddV2", "BiasAdd", "Div", "DivNoNan", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Mod",
        "Mul", "Pow", "RealDiv", "SquaredDifference", "Sub"),
    "basic_math": ("Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atan2", "Atanh", "Ceil", "ClipByValue", "Complex",
        "ComplexAbs", "Cos", "Cosh", "Elu", "Erf", "Exp", "Expm1", "Floor", "Imag", "IsFinite", "IsInf", "IsNan",
        "LeakyRelu", "Log", "Log1p", "Neg", "Prelu", "Real", "Reciprocal", "Relu", "Relu6", "Round", "Rsqrt",
        "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Sqrt", "Square", "Tan", "Tanh"),
    "control": ("EmptyTensorList", "Enter", "Exit", "If", "LoopCond", "Merge", "NextIteration", "StatelessIf",
        "StatelessWhile", "Switch", "TensorArrayCloseV3", "TensorArrayConcatV3", "TensorArrayGatherV3",
        "TensorArrayReadV3", "TensorArrayScatterV3", "TensorArraySizeV3", "TensorArraySplitV3", "TensorArrayV3",
        "TensorArrayWriteV3", "TensorListConcat", "TensorListConcatV2", "TensorListFromTensor", "TensorListGather",
        "TensorListGetItem", "TensorListLength", "TensorListPopBack", "TensorListPushBack", "TensorListReserve",
        "TensorListResize", "TensorListScatter", "TensorListScatterV2", "TensorListSetItem", "TensorListSplit",
        "TensorListStack", "While"),
    "convolution": ("AvgPool", "AvgPool3D", "Conv1D", "Conv2D", "Conv2DBackpropInput", "Conv3D", "DepthwiseConv2d",
        "DepthwiseConv2dNative", "Dilation2D", "FusedDepthwiseConv2dNative", "MaxPool", "MaxPool3D",
        "MaxPoolWithArgmax", "_FusedConv2D"),
    "creation": ("Fill", "LinSpace", "Multinomial", "OneHot", "Ones", "OnesLike", "RandomStandardNormal", "RandomUniform",
        "RandomUniformInt", "Range", "TruncatedNormal", "Zeros", "ZerosLike"),
    "dynamic": ("ListDiff", "NonMaxSuppressionV2", "NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
        "Where"),
    "evaluation": ("LowerBound", "TopKV2", "Unique", "UniqueV2", "UpperBound"),
    "graph": ("Const", "FakeQuantWithMinMaxVars", "Identity", "IdentityN", "NoOp", "Placeholder",
        "PlaceholderWithDefault", "Print", "Rank", "Shape", "ShapeN", "Size", "Snapshot", "StopGradient"),
    "hash_table": ("HashTable", "HashTableV2", "InitializeTable", "InitializeTableV2", "LookupTableFind", "LookupTableFindV2",
        "LookupTableImport", "LookupTableImportV2", "LookupTableSize", "LookupTableSizeV2"),
    "image": ("CropAndResize", "ImageProjectiveTransformV3", "ResizeBilinear", "ResizeNearestNeighbor"),
    "logical": ("BitwiseAnd", "Equal", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalNot",
        "LogicalOr", "NotEqual", "Select", "SelectV2"),
    "matrices": ("BatchMatMul", "BatchMatMulV2", "Einsum", "MatMul", "MatrixBandPart", "Transpose", "_FusedMatMul"),
    "normalization": ("EuclideanNorm", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "LRN", "LogSoftmax", "Softmax"),
    "ragged": ("RaggedGather", "RaggedRange", "RaggedTensorToTensor"),
    "reduction": ("All", "Any", "ArgMax", "ArgMin", "Bincount", "Cumprod", "Cumsum", "DenseBincount", "Max", "Mean", "Min",
        "Prod", "Sum"),
    "slice_join": ("Concat", "ConcatV2", "Gather", "GatherNd", "GatherV2", "Pack", "Reverse", "ReverseV2", "ScatterNd",
        "Slice", "SparseToDense", "Split", "SplitV", "StridedSlice", "TensorScatterUpdate", "Tile", "Unpack"),
    "sparse": ("SparseFillEmptyRows", "SparseReshape", "SparseSegmentMean", "SparseSegmentSum"),
    "spectral": ("FFT", "IFFT", "IRFFT", "RFFT"),
    "string": ("StaticRegexReplace", "StringNGrams", "StringSplit", "StringToHashBucketFast"),
    "tfdf": ("SimpleMLCreateModelResource", "SimpleMLInferenceOpWithHandle", "SimpleMLLoadModelFromPathWithHandle"),
    "transformation": ("BatchToSpaceND", "BroadcastArgs", "BroadcastTo", "Cast", "DepthToSpace", "EnsureShape", "ExpandDims",
        "MirrorPad", "Pad", "PadV2", "Reshape", "SpaceToBatchND", "Squeeze"),
}
#: every op TF.js runs
OPS: frozenset[str] = frozenset(op for ops in FAMILIES.values() for op in ops)
