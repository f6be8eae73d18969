"""ResNet-50 (He et al. 2016) image classification fit, the mixed-precision study's training model: keras.applications
(Keras 3 and tf.keras), torchvision, paddle.vision, each from its own constructor (two networks under one name)."""
from __future__ import annotations

from kbench.models import family
from kbench.models.mappings import resnet50 as layouts
from kbench.models.tally import CONV, Tally, conv2d, conv_size, linear


def keras_applications_kwargs(arch: dict) -> dict:
    """keras.applications.ResNet50(**kwargs) (Keras 3 and tf.keras): random weights, logits out."""
    size = arch["image_size"]
    return {"weights": None, "input_shape": (size, size, 3), "classes": arch["num_classes"],
            "classifier_activation": None}


def torchvision_kwargs(arch: dict) -> dict:
    """torchvision.models.resnet50(**kwargs); paddle.vision.models.resnet50 takes the same minus weights."""
    return {"weights": None, "num_classes": arch["num_classes"]}


def paddle_vision_kwargs(arch: dict) -> dict:
    return {"num_classes": arch["num_classes"]}


# Where each library's ResNet-50 puts the stride of a downsampling bottleneck block. keras.applications (Keras 3 and
# tf.keras: keras/src/applications/resnet.py block1, `Conv2D(filters, 1, strides=stride)` first) builds the
# original ResNet (v1): the stride on the first 1x1 convolution. torchvision (models/resnet.py Bottleneck:
# `self.conv2 = conv3x3(width, width, stride)`) builds v1.5: the stride on the 3x3 one, about 6% more FLOPs at 224 px.
# paddle.vision's resnet50 (BottleneckBlock: the stride on conv2, the 3x3) is torchvision's v1.5, name for name.
STRIDE_ON = {"keras3": "1x1", "keras2": "1x1", "native_torch": "3x3", "paddle": "3x3"}
VARIANT = {"1x1": "ResNet v1 (stride on the first 1x1 conv; keras.applications)",
                    "3x3": "ResNet v1.5 (stride on the 3x3 conv; torchvision)"}


def stride_on(adapter: str | None) -> str:
    """"1x1" (v1) or "3x3" (v1.5) for the column's adapter; torchvision's where the adapter is not a column's."""
    return STRIDE_ON.get(adapter, "3x3")


def network_name(adapter: str | None) -> str:
    """The network a column's adapter builds under the name ResNet-50."""
    return VARIANT[stride_on(adapter)]


LAYERS = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # (planes, Bottleneck blocks, stride)


def fit_flops(spec, t: Tally) -> None:
    """The column's ResNet-50 at image_size (stride_on: torchvision's v1.5 or
    keras.applications' v1): conv1 Conv2d(3, 64, 7, stride 2, padding 3) (weight gradient only: the images need
    none), maxpool 3x3 stride 2; layer1-4 of Bottleneck: conv1 1x1 (in, planes), conv2 3x3 (planes, planes), conv3
    1x1 (planes, 4 planes), the block's stride on conv2 (v1.5) or on conv1 (v1, which so runs conv1 and conv2 on the
    smaller grid), and on each layer's first block the downsample Conv2d(in, 4 planes, 1, stride); avgpool; fc
    Linear(2048, num_classes). Fit trains everything. keras' convolution biases are additions, not counted."""
    a, b = spec.arch, spec.batch_size
    v1 = stride_on(spec.adapter) == "1x1"
    size = conv_size(a["image_size"], 7, 2, 3)
    t.add("stem conv", conv2d(b, 3, 64, 7, size, size), grads=1, kind=CONV)
    size, inplanes = conv_size(size, 3, 2, 1), 64
    for planes, blocks, stride in LAYERS:
        for k in range(blocks):
            step = stride if k == 0 else 1
            out = conv_size(size, 3, step, 1)
            first = out if v1 else size         # the grid conv1 runs on
            t.add("bottleneck convs", conv2d(b, inplanes, planes, 1, first, first)
                  + conv2d(b, planes, planes, 3, out, out) + conv2d(b, planes, 4 * planes, 1, out, out), grads=2,
                  kind=CONV)
            if k == 0:
                t.add("downsample convs", conv2d(b, inplanes, 4 * planes, 1, out, out), grads=2, kind=CONV)
            size, inplanes = out, 4 * planes
    t.add("fc", linear(b, inplanes, a["num_classes"]), grads=2)


def fit_inputs(spec, rng) -> dict:
    """Image classification: uniform [0, 1) images and class labels."""
    arch, n = spec.arch, spec.batch_size
    size = arch["image_size"]
    images = rng.random((n, size, size, 3), dtype="float32")
    return {"images": images, "labels": rng.integers(0, arch["num_classes"], (n,), dtype="int32")}


def contraction_and_depth(spec) -> tuple[int, int]:
    return 9 * 512, 53


FAMILY = family.register(
    name="resnet50", about="ResNet-50 image classifier (v1 in keras.applications, v1.5 in torchvision/paddle.vision)",
    tasks=("fit",),
    libraries={"keras.applications": keras_applications_kwargs, "torchvision": torchvision_kwargs,
               "paddle.vision": paddle_vision_kwargs},
    inputs={"fit": fit_inputs}, flops={"fit": fit_flops}, contraction_and_depth=contraction_and_depth,
    example={"fit": "image"}, layouts=layouts, networks=network_name)
