// The image data sets (needs the platipus::images target: stb and zlib):
// Omniglot, MiniImagenet, CelebA and Fashion-MNIST readers, their cache,
// the N-way K-shot sampler and the CelebA attribute tasks.
#pragma once

#include "platipus/data/celeba.hpp"
#include "platipus/data/fashion_mnist.hpp"
#include "platipus/data/few_shot.hpp"
#include "platipus/data/miniimagenet.hpp"
#include "platipus/data/omniglot.hpp"
