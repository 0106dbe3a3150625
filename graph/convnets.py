"""Compact convolutional networks with random weights for tests and benchmarks: a
ResNet-18-style network (BasicBlock, 1x1 downsample with batch norm) and a
MobileNet-V2-style network (inverted residuals: 1x1 expansion, 3x3 depthwise, linear 1x1
projection, ReLU6), both in eval mode with randomised batch-norm statistics.  They follow
torchvision's architectures (torchvision itself is not needed); ``width`` scales every
channel count and ``blocks`` the number of blocks per stage, so tests use small ones.
torch is imported when one is built."""
from __future__ import annotations

from typing import Sequence


def _randomise_bn(model, seed: int) -> None:
    """Non-trivial batch-norm statistics and affine parameters (fresh ones are 0 / 1)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            assert m.running_mean is not None and m.running_var is not None
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(c, generator=g) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)


def resnet18(width: int = 64, blocks: Sequence[int] = (2, 2, 2, 2), num_classes: int = 1000,
             seed: int = 0):
    """torchvision's ``resnet18`` layout with base width ``width`` (64 is the real one)."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], width
            for k, n in enumerate(blocks):
                cout = width * 2 ** k
                for b in range(n):
                    layers.append(BasicBlock(cin, cout, 2 if (b == 0 and k > 0) else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.avgpool(self.layers(x))
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(seed)
    model = ResNet()
    _randomise_bn(model, seed)
    return model.eval()


def _divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


# torchvision's inverted-residual settings: expansion t, channels c, repeats n, stride s
MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(width_mult: float = 1.0, settings: Sequence[tuple] = MOBILENET_V2_SETTINGS,
                 last_channel: int = 1280, num_classes: int = 1000, seed: int = 0):
    """torchvision's ``mobilenet_v2`` layout (channel counts rounded to multiples of 8 as
    there; ``settings`` and ``last_channel`` shrink it for tests)."""
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int):
            super().__init__()
            hidden = int(round(cin * t))
            self.use_res = stride == 1 and cin == cout
            layers = conv_bn(cin, hidden, 1, 1) if t != 1 else []
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)  # depthwise
            layers += conv_bn(hidden, cout, 1, 1, act=False)              # linear projection
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            cin = _divisible(32 * width_mult)
            last = _divisible(last_channel * max(1.0, width_mult))
            feats = conv_bn(3, cin, 3, 2)
            for t, c, n, s in settings:
                cout = _divisible(c * width_mult)
                for i in range(n):
                    feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            feats += conv_bn(cin, last, 1, 1)
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    torch.manual_seed(seed)
    model = MobileNetV2()
    _randomise_bn(model, seed)
    return model.eval()
