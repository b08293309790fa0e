"""The TensorFlow ops a SavedModel may use: pure computation, vetted by family (plain data).

A SavedModel's graph is vetted against ``VETTED`` before TensorFlow loads it (``sources.tf_vet``): an
op outside it is refused, whatever it does. The families were enumerated from the graphs of the models
the project reads and makes (Keras ``model.export``, onnx2tf's SavedModels, ``tf.saved_model.save`` of
tf.function modules, tf_keras recurrent models, TF1 SavedModels) and widened to their neighbours. None
reads or writes a file, a socket or the environment, or runs Python.

Four kinds of op are allowed only in one place, and the graph walk checks where they stand:
``TEXT_FILE_TABLE_OPS`` (a lookup table read from a text file: only from an asset inside ``assets/``),
``RESTORE_OPS`` and ``SAVE_OPS`` (checkpoint I/O, ``SAVER``: only in the meta graph's saver, never in a
function a signature or the object graph reaches) and ``PrintV2`` (only to a standard stream, ``PRINT_STREAMS``).
"""
from __future__ import annotations

#: element-wise arithmetic and math
_MATH = {
    "Abs", "Acos", "Acosh", "Add", "AddN", "AddV2", "AccumulateNV2", "Angle", "ApproximateEqual", "Asin", "Asinh",
    "Atan", "Atan2", "Atanh", "BesselI0", "BesselI0e", "BesselI1", "BesselI1e", "BesselJ0", "BesselJ1", "BesselK0",
    "BesselK0e", "BesselK1", "BesselK1e", "BesselY0", "BesselY1", "Betainc", "Ceil", "ClipByValue", "Complex",
    "ComplexAbs", "Conj", "Cos", "Cosh", "Cross", "Cumprod", "Cumsum", "CumulativeLogsumexp", "Dawsn", "Digamma",
    "Div", "DivNoNan", "Erf", "Erfc", "Erfinv", "Exp", "Expint", "Expm1", "Floor", "FloorDiv", "FloorMod",
    "FresnelCos", "FresnelSin", "Igamma", "IgammaGradA", "Igammac", "Imag", "Inv", "IsFinite", "IsInf", "IsNan",
    "Lgamma", "Log", "Log1p", "Maximum", "Minimum", "Mod", "Mul", "MulNoNan", "Ndtri", "Neg", "NextAfter",
    "Polygamma", "Pow", "Real", "RealDiv", "Reciprocal", "Rint", "Round", "Rsqrt", "Sign", "Sin", "Sinh", "Spence",
    "Sqrt", "Square", "SquaredDifference", "Sub", "Tan", "Tanh", "TruncateDiv", "TruncateMod", "Xdivy", "Xlog1py",
    "Xlogy", "Zeta",
}
#: comparison, logic and bits
_LOGIC = {
    "Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalNot", "LogicalOr",
    "Select", "SelectV2", "Where", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift",
    "PopulationCount",
}
#: reductions, segments, sorting, counting and sets
_REDUCE = {
    "All", "Any", "ArgMax", "ArgMin", "EuclideanNorm", "Max", "Mean", "Min", "Prod", "Sum", "L2Loss",
    "SegmentMax", "SegmentMaxV2", "SegmentMean", "SegmentMin", "SegmentMinV2", "SegmentProd", "SegmentProdV2",
    "SegmentSum", "SegmentSumV2", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd",
    "UnsortedSegmentSum", "SparseSegmentMean", "SparseSegmentMeanWithNumSegments", "SparseSegmentSqrtN",
    "SparseSegmentSqrtNWithNumSegments", "SparseSegmentSum", "SparseSegmentSumWithNumSegments",
    "TopK", "TopKV2", "ApproxTopK", "InTopK", "InTopKV2", "NthElement", "Bincount", "DenseBincount",
    "HistogramFixedWidth", "Bucketize", "LowerBound", "UpperBound", "Unique", "UniqueV2", "UniqueWithCounts",
    "UniqueWithCountsV2", "ListDiff", "SetSize", "DenseToDenseSetOperation", "DenseToSparseSetOperation",
    "SparseToSparseSetOperation", "DenseCountSparseOutput",
}
#: matrices, linear algebra and spectral transforms
_LINALG = {
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "SparseMatMul", "MatrixBandPart",
    "MatrixDeterminant", "LogMatrixDeterminant", "MatrixDiag", "MatrixDiagV2", "MatrixDiagV3", "MatrixDiagPart",
    "MatrixDiagPartV2", "MatrixDiagPartV3", "MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3", "MatrixInverse",
    "MatrixSolve", "MatrixSolveLs", "MatrixTriangularSolve", "BandedTriangularSolve", "MatrixSquareRoot",
    "MatrixExponential", "MatrixLogarithm", "Cholesky", "Qr", "Svd", "SelfAdjointEigV2", "Eig", "Lu",
    "TridiagonalMatMul", "TridiagonalSolve", "Diag", "DiagPart", "ConjugateTranspose",
    "FFT", "FFT2D", "FFT3D", "FFTND", "IFFT", "IFFT2D", "IFFT3D", "IFFTND", "RFFT", "RFFT2D", "RFFT3D", "RFFTND",
    "IRFFT", "IRFFT2D", "IRFFT3D", "IRFFTND",
}
#: neural-network layers: convolution, pooling, normalization, activations, losses (and their gradients)
_NN = {
    "BiasAdd", "BiasAddV1", "BiasAddGrad", "Conv", "Conv2D", "Conv3D", "Conv2DBackpropInput",
    "Conv2DBackpropInputV2", "Conv2DBackpropFilter", "Conv2DBackpropFilterV2", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter", "Dilation2D", "FusedPadConv2D", "FusedResizeAndPadConv2D",
    "AvgPool", "AvgPool3D", "AvgPoolGrad", "MaxPool", "MaxPoolV2", "MaxPool3D", "MaxPoolWithArgmax", "MaxPoolGrad",
    "MaxPoolGradV2", "MaxPoolGradGrad", "MaxPoolGradGradV2", "MaxPoolGradWithArgmax", "FractionalAvgPool",
    "FractionalMaxPool", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
    "FusedBatchNormGradV2", "FusedBatchNormGradV3", "BatchNormWithGlobalNormalization", "LRN", "LRNGrad",
    "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus", "Softsign", "Sigmoid", "Softmax", "LogSoftmax",
    "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "LeakyReluGrad", "SoftplusGrad", "SoftsignGrad", "SigmoidGrad",
    "TanhGrad", "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "InvGrad", "BroadcastGradientArgs",
    "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", "CTCGreedyDecoder",
    "CTCBeamSearchDecoder", "CTCLoss", "CTCLossV2", "DataFormatDimMap", "DataFormatVecPermute",
}
#: recurrent cells and their fused (cuDNN-style) kernels
_RNN = {
    "LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2",
    "GRUBlockCell", "GRUBlockCellGrad", "CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop",
    "CudnnRNNBackpropV2", "CudnnRNNBackpropV3", "CudnnRNNParamsSize", "CudnnRNNParamsToCanonical",
    "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2",
}
#: quantization as arithmetic (fake quantization, quantize/dequantize pairs)
_QUANT = {
    "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
    "FakeQuantWithMinMaxArgsGradient", "FakeQuantWithMinMaxVarsGradient", "FakeQuantWithMinMaxVarsPerChannelGradient",
    "QuantizeAndDequantize", "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4",
    "QuantizeV2", "Dequantize",
}
#: tensors: constants, placeholders, shapes, slicing, joining, gathering, scattering, padding
_ARRAY = {
    "Const", "HostConst", "Placeholder", "PlaceholderV2", "PlaceholderWithDefault", "Identity", "IdentityN",
    "Snapshot", "StopGradient", "PreventGradient", "GuaranteeConst", "CheckNumerics", "CheckNumericsV2",
    "EnsureShape", "Cast", "Bitcast", "BroadcastArgs", "BroadcastTo", "Shape", "ShapeN", "Size", "Rank",
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "InvertPermutation", "Concat", "ConcatV2", "ConcatOffset",
    "ParallelConcat", "Pack", "Unpack", "Split", "SplitV", "Slice", "StridedSlice", "StridedSliceGrad",
    "TensorStridedSliceUpdate", "Tile", "TileGrad", "Pad", "PadV2", "MirrorPad", "MirrorPadGrad", "Reverse",
    "ReverseV2", "ReverseSequence", "Roll", "Gather", "GatherV2", "GatherNd", "ScatterNd", "TensorScatterAdd",
    "TensorScatterMax", "TensorScatterMin", "TensorScatterSub", "TensorScatterUpdate", "DynamicPartition",
    "DynamicStitch", "ParallelDynamicStitch", "Fill", "Empty", "ZerosLike", "OnesLike", "Range", "LinSpace",
    "OneHot", "UnravelIndex", "DepthToSpace", "SpaceToDepth", "BatchToSpace", "BatchToSpaceND", "SpaceToBatch",
    "SpaceToBatchND", "ExtractImagePatches", "ExtractVolumePatches", "InplaceAdd", "InplaceSub", "InplaceUpdate",
    "DeepCopy", "CompositeTensorVariantFromComponents", "CompositeTensorVariantToComponents",
}
#: control flow and function calls (callees must be functions of the graph's own library, themselves vetted)
_CONTROL = {
    "NoOp", "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase", "PartitionedCall",
    "StatefulPartitionedCall", "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "RefEnter",
    "RefExit", "RefSwitch", "RefMerge", "RefNextIteration", "RefIdentity", "ControlTrigger", "Assert",
    "OptionalFromValue", "OptionalGetValue", "OptionalHasValue", "OptionalNone",
}
#: in-memory lists, arrays, maps and stacks (while loops, recurrent layers)
_CONTAINERS = {
    "EmptyTensorList", "TensorListConcat", "TensorListConcatLists", "TensorListConcatV2", "TensorListElementShape",
    "TensorListFromTensor", "TensorListGather", "TensorListGetItem", "TensorListLength", "TensorListPopBack",
    "TensorListPushBack", "TensorListPushBackBatch", "TensorListReserve", "TensorListResize", "TensorListScatter",
    "TensorListScatterIntoExistingList", "TensorListScatterV2", "TensorListSetItem", "TensorListSplit",
    "TensorListStack", "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3",
    "TensorArrayScatterV3", "TensorArrayConcatV3", "TensorArraySplitV3", "TensorArraySizeV3", "TensorArrayCloseV3",
    "TensorArrayGradV3", "TensorArrayGradWithShape", "EmptyTensorMap", "TensorMapInsert", "TensorMapLookup",
    "TensorMapErase", "TensorMapHasKey", "TensorMapSize", "TensorMapStackKeys", "StackV2", "StackPushV2",
    "StackPopV2", "StackCloseV2",
}
#: variables (resource and TF1 reference variables) and the optimizers' update kernels
_VARIABLES = {
    "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "VariableShape", "DestroyResourceOp", "DisableCopyOnRead", "ResourceGather",
    "ResourceGatherNd", "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterMul", "ResourceScatterDiv",
    "ResourceScatterMin", "ResourceScatterMax", "ResourceScatterUpdate", "ResourceScatterNdAdd",
    "ResourceScatterNdSub", "ResourceScatterNdUpdate", "ResourceScatterNdMax", "ResourceScatterNdMin",
    "ResourceStridedSliceAssign", "Variable", "VariableV2", "Assign", "AssignAdd", "AssignSub",
    "IsVariableInitialized", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
    "ScatterUpdate", "ScatterNdAdd", "ScatterNdSub", "ScatterNdUpdate",
    "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyKerasMomentum", "ResourceApplyAdam",
    "ResourceApplyAdamWithAmsgrad", "ResourceApplyAdagrad", "ResourceApplyAdagradV2", "ResourceApplyAdadelta",
    "ResourceApplyAdaMax", "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp", "ResourceApplyFtrl",
    "ResourceApplyFtrlV2",
}
#: random numbers (stateful, stateless and counter-based generators)
_RANDOM = {
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "ParameterizedTruncatedNormal",
    "RandomGamma", "RandomPoisson", "RandomPoissonV2", "RandomShuffle", "Multinomial", "RandomIndexShuffle",
    "StatelessRandomUniform", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt", "StatelessRandomNormal",
    "StatelessTruncatedNormal", "StatelessRandomUniformV2", "StatelessRandomUniformIntV2",
    "StatelessRandomUniformFullIntV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2",
    "StatelessParameterizedTruncatedNormal", "StatelessMultinomial", "StatelessRandomBinomial",
    "StatelessRandomGammaV2", "StatelessRandomGammaV3", "StatelessRandomPoisson", "StatelessShuffle",
    "StatelessRandomGetKeyCounter", "StatelessRandomGetAlg", "StatelessRandomGetKeyCounterAlg",
    "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt", "StatefulStandardNormalV2",
    "StatefulTruncatedNormal", "StatefulRandomBinomial", "RngReadAndSkip", "RngSkip", "NonDeterministicInts",
    "SampleDistortedBoundingBoxV2", "StatelessSampleDistortedBoundingBox",
}
#: images and audio held in tensors (resizing, colour, boxes, in-memory codecs)
_IMAGE = {
    "ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea", "ResizeBilinearGrad",
    "ResizeNearestNeighborGrad", "ResizeBicubicGrad", "ScaleAndTranslate", "CropAndResize", "AdjustContrastv2",
    "AdjustHue", "AdjustSaturation", "RGBToHSV", "HSVToRGB", "DrawBoundingBoxesV2", "NonMaxSuppressionV3",
    "NonMaxSuppressionV4", "NonMaxSuppressionV5", "NonMaxSuppressionWithOverlaps", "CombinedNonMaxSuppression",
    "ImageProjectiveTransformV2", "ImageProjectiveTransformV3", "ExtractGlimpseV2", "DecodeJpeg",
    "DecodeAndCropJpeg", "DecodePng", "DecodeGif", "DecodeBmp", "DecodeWebP", "DecodeImage", "ExtractJpegShape",
    "EncodeJpeg", "EncodeJpegVariableQuality", "EncodePng", "DecodeWav", "EncodeWav", "AudioSpectrogram", "Mfcc",
}
#: strings held in tensors (no op here opens the file a string may name)
_STRINGS = {
    "AsString", "StringFormat", "StringJoin", "StringLength", "StringLower", "StringUpper", "StringSplit",
    "StringSplitV2", "StringStrip", "StringToHashBucket", "StringToHashBucketFast", "StringToHashBucketStrong",
    "StringToNumber", "StringNGrams", "Substr", "ReduceJoin", "RegexFullMatch", "RegexReplace",
    "StaticRegexFullMatch", "StaticRegexReplace", "UnicodeDecode", "UnicodeDecodeWithOffsets", "UnicodeEncode",
    "UnicodeScript", "UnicodeTranscode", "UnsortedSegmentJoin", "DecodeBase64", "EncodeBase64", "Fingerprint",
    "EditDistance",
}
#: parsing and serializing tensors and tf.Example protos held in tensors
_PARSING = {
    "ParseExample", "ParseExampleV2", "ParseSingleExample", "ParseSequenceExample", "ParseSequenceExampleV2",
    "ParseSingleSequenceExample", "ParseTensor", "SerializeTensor", "DecodeRaw", "DecodePaddedRaw", "DecodeCSV",
    "DecodeCompressed", "DecodeJSONExample", "SerializeSparse", "SerializeManySparse", "DeserializeSparse",
    "DeserializeManySparse",
}
#: sparse and ragged tensors
_SPARSE = {
    "SparseAdd", "SparseConcat", "SparseReorder", "SparseReshape", "SparseSlice", "SparseSplit",
    "SparseTensorDenseAdd", "SparseTensorDenseMatMul", "SparseToDense", "SparseFillEmptyRows", "SparseReduceSum",
    "SparseReduceSumSparse", "SparseReduceMax", "SparseReduceMaxSparse", "SparseSoftmax", "SparseDenseCwiseAdd",
    "SparseDenseCwiseMul", "SparseDenseCwiseDiv", "SparseSparseMaximum", "SparseSparseMinimum", "SparseCross",
    "SparseCrossV2", "SparseCrossHashed", "SparseBincount", "SparseCountSparseOutput", "RaggedTensorToTensor",
    "RaggedTensorToSparse", "RaggedTensorToVariant", "RaggedTensorFromVariant", "RaggedGather", "RaggedRange",
    "RaggedCross", "RaggedBincount", "RaggedCountSparseOutput", "RaggedFillEmptyRows",
}
#: lookup tables filled from tensors (a table read from a file: ``TEXT_FILE_TABLE_OPS``)
_TABLES = {
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2", "AnonymousHashTable",
    "AnonymousMutableHashTable", "AnonymousMutableHashTableOfTensors", "AnonymousMutableDenseHashTable",
    "InitializeTable", "InitializeTableV2", "LookupTableFind", "LookupTableFindV2", "LookupTableInsert",
    "LookupTableInsertV2", "LookupTableImport", "LookupTableImportV2", "LookupTableExport", "LookupTableExportV2",
    "LookupTableSize", "LookupTableSizeV2", "LookupTableRemoveV2",
}
#: logging to the process's standard streams (``PrintV2`` only with a ``PRINT_STREAMS`` output stream)
_LOGGING = {"Print", "PrintV2", "Timestamp"}

VETTED: frozenset[str] = frozenset().union(
    _MATH, _LOGIC, _REDUCE, _LINALG, _NN, _RNN, _QUANT, _ARRAY, _CONTROL, _CONTAINERS, _VARIABLES, _RANDOM, _IMAGE,
    _STRINGS, _PARSING, _SPARSE, _TABLES, _LOGGING)

#: ``PrintV2``'s ``output_stream`` values that are not a file (``file://...``)
PRINT_STREAMS = frozenset({"stderr", "stdout", "log(info)", "log(warning)", "log(error)"})

#: a lookup table filled from a text file: only from an asset of the SavedModel's ``assets/``
TEXT_FILE_TABLE_OPS = frozenset({"InitializeTableFromTextFile", "InitializeTableFromTextFileV2"})
#: checkpoint reads: only in the saver's restore op, on the file prefix the loader feeds (``variables/``)
RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})
#: checkpoint writes: only in the saver's save op, which no loader runs
SAVE_OPS = frozenset({"SaveV2", "Save", "SaveSlices", "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec"})

#: why an op outside ``VETTED`` is refused, for those known to touch the world (others: not vetted)
_FILES = "reads or writes files"
_WHY = {
    **dict.fromkeys(("ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "FileSystemSetConfiguration",
                     "InitializeTableFromDataset", "LoadAndRemapMatrix", "GenerateVocabRemapping", "Skipgram",
                     "FixedUnigramCandidateSampler", "DecodeProtoV2", "EncodeProto", "CalibrationStatisticsSaver",
                     "DumpTensor", "DTensorRestoreV2", "DistributedSave") + tuple(RESTORE_OPS | SAVE_OPS
                                                                                     | TEXT_FILE_TABLE_OPS), _FILES),
    **dict.fromkeys(("PyFunc", "PyFuncStateless", "EagerPyFunc"), "runs Python code"),
    **dict.fromkeys(("Send", "Recv", "_Send", "_Recv", "_HostSend", "_HostRecv", "RemoteCall", "RpcClient",
                     "RpcServer", "RpcCall", "RpcServerStart", "RpcServerRegister"), "talks to other processes"),
}
_FILE_WORDS = ("Reader", "Dataset", "Summary", "Debug", "File", "Checkpoint", "Save", "Restore", "Load")


def why_refused(op: str) -> str:
    """Why ``op`` (not in ``VETTED``) is refused, in a few words."""
    if op in _WHY:
        return _WHY[op]
    if any(w in op for w in _FILE_WORDS):
        return f"{_FILES} (a reader, writer, data pipeline or debug op)"
    if op.startswith(("Collective", "Nccl", "Xla", "Tpu", "TPU", "_")):
        return "not a vetted computation op (device, collective or internal op)"
    return "not a vetted computation op"

#: the same sets under the names the graph walk (``tf_vet``) reads
PRINT = frozenset({"PrintV2"})
PURE = VETTED - PRINT
SAVER = RESTORE_OPS | SAVE_OPS
TEXT_TABLE = TEXT_FILE_TABLE_OPS
