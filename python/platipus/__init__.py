"""platipus: MAML and PLATIPUS (Finn, Xu, Levine, NeurIPS 2018) from Python.

The C++ library's learners, networks, losses and task samplers, with NumPy
arrays in and out and the same bits as a C++ program of the same seed and
settings (docs/python.md)::

    import platipus as pp
    gen = pp.Generator(0)
    tasks = pp.SinusoidLine(support=10, query=10)
    maml = pp.Maml(pp.mlp(inputs=1, hidden=[40, 40], outputs=1), pp.MseLoss(),
                   generator=gen, inner_loop={"steps": 5, "learning_rate": 0.01})
    maml.fit(tasks, steps=10000, meta_batch=25)
    support_x, support_y, query_x, query_y = tasks.sample(4, gen)
    prediction = maml.predict(maml.adapt(support_x, support_y), query_x)

Settings are keyword arguments with the C++ fields' names; nested settings
(``inner_loop``, ``meta_optimizer``) are dicts. A misspelt or ill-typed one
raises ValueError naming it.
"""

from ._platipus import Generator, Network, Loss, library_version
from ._learners import (
    Anil,
    Maml,
    MamlNoise,
    MamlPlusPlus,
    MetaSgd,
    Platipus,
    Reptile,
    cuda_available,
)
from ._parts import (
    AmbiguousCeleba,
    BceWithLogitsLoss,
    Celeba,
    Circles,
    FewShotImages,
    GaussianNllLoss,
    MseLoss,
    SineLineFunction,
    SinusoidLine,
    SoftmaxCrossEntropyLoss,
    conv4,
    mlp,
)
from ._scores import estimate, score_classification, score_regression

__version__ = library_version

__all__ = [
    "AmbiguousCeleba",
    "Anil",
    "BceWithLogitsLoss",
    "Celeba",
    "Circles",
    "FewShotImages",
    "GaussianNllLoss",
    "Generator",
    "Loss",
    "Maml",
    "MamlNoise",
    "MamlPlusPlus",
    "MetaSgd",
    "MseLoss",
    "Network",
    "Platipus",
    "Reptile",
    "SineLineFunction",
    "SinusoidLine",
    "SoftmaxCrossEntropyLoss",
    "conv4",
    "cuda_available",
    "estimate",
    "mlp",
    "score_classification",
    "score_regression",
]
