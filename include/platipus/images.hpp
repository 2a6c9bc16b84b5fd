// The image data sets (needs the platipus::images target: stb and zlib):
// Omniglot, MiniImagenet and Fashion-MNIST readers, their cache, and the
// N-way K-shot sampler.
#pragma once

#include "platipus/data/fashion_mnist.hpp"
#include "platipus/data/few_shot.hpp"
#include "platipus/data/miniimagenet.hpp"
#include "platipus/data/omniglot.hpp"
