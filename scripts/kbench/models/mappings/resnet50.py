"""ResNet-50: keras.applications.ResNet50 (the reference; tf.keras.applications' has the same weights in the same
order) <-> torchvision resnet50 made ResNet v1 for the check (kbench.adapters.native_torch._as_keras_resnet50: the
stride on conv1, a bias on every conv). The as-built torchvision network has no conv biases: loading reports them."""
import re

from kbench.models.weights import CONV, Mapping, Rule, dense_rules


def _resnet_conv_bn(keras: str, conv: str, bn: str) -> list[Rule]:
    """A keras.applications conv (with its bias) and batch norm -> torchvision's conv and bn (the conv bias goes to
    a bias the check adds to torchvision's bias-free conv: kbench.adapters.native_torch aligns the network)."""
    return [Rule(f"{keras}_conv/kernel", f"{conv}.weight", CONV), Rule(f"{keras}_conv/bias", f"{conv}.bias"),
            Rule(f"{keras}_bn/gamma", f"{bn}.weight"), Rule(f"{keras}_bn/beta", f"{bn}.bias"),
            Rule(f"{keras}_bn/moving_mean", f"{bn}.running_mean"), Rule(f"{keras}_bn/moving_variance", f"{bn}.running_var")]


class _Shifted(Mapping):
    """ResNet's Keras names count stages from 2 and blocks from 1, torchvision's layers from 1 and blocks from 0."""

    def _match(self, path):
        name, layout = super()._match(path)
        return re.sub(r"layer(\d)\.(\d+)", lambda m: f"layer{int(m[1]) - 1}.{int(m[2]) - 1}", name), layout


_B = r"conv(?P<s>[2-5])_block(?P<b>\d+)"
RESNET50 = _Shifted(tuple([
    *_resnet_conv_bn("conv1", "conv1", "bn1"),
    *_resnet_conv_bn(rf"{_B}_(?P<n>[123])", "layer{s}.{b}.conv{n}", "layer{s}.{b}.bn{n}"),
    *_resnet_conv_bn(rf"{_B}_0", "layer{s}.{b}.downsample.0", "layer{s}.{b}.downsample.1"),
    *dense_rules("predictions", "fc"),
]))

MAPPINGS = {("resnet50", "fit"): RESNET50}
DERIVED = (r".*num_batches_tracked$",)   # a step count torch keeps: no reference carries it
