// ResNet-18's distinct convolution shapes at a 224x224 input: the rows of the convolution and
// bf16 GEMM benchmarks (bench/conv_bench.cpp, bench/gemm_bf16_bench.cpp).
#pragma once

struct ConvShape {
  const char* name;
  int ic, oc, hw, k, s, p;  // in and out channels, input height = width, kernel, stride, padding
};

inline constexpr ConvShape kResnet18Convs[] = {
    {"conv1 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3},
    {"3x3 64->64 @56", 64, 64, 56, 3, 1, 1},
    {"3x3/2 64->128 @56", 64, 128, 56, 3, 2, 1},
    {"1x1/2 64->128 @56", 64, 128, 56, 1, 2, 0},
    {"3x3 128->128 @28", 128, 128, 28, 3, 1, 1},
    {"3x3/2 128->256 @28", 128, 256, 28, 3, 2, 1},
    {"1x1/2 128->256 @28", 128, 256, 28, 1, 2, 0},
    {"3x3 256->256 @14", 256, 256, 14, 3, 1, 1},
    {"3x3/2 256->512 @14", 256, 512, 14, 3, 2, 1},
    {"1x1/2 256->512 @14", 256, 512, 14, 1, 2, 0},
    {"3x3 512->512 @7", 512, 512, 7, 3, 1, 1},
};
