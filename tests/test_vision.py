"""Image encoders and augmentation: random shift, spatial pooling, pretrained weights from a
local file, and the shared encoder with the actor's gradient stopped (DrQ/SERL)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.errors import ConfigError
from robotrl.vision import DrQConv, PixelEncoder, ResNet10, SpatialEmbedding, SpatialSoftmax, random_shift


def _frames(B=16, H=32, W=32, seed=0):
    g = np.random.default_rng(seed)
    return torch.from_numpy(g.integers(0, 256, (B, H, W, 3), dtype=np.uint8))


def test_random_shift_differs_per_sample_keeps_shape_and_is_a_padded_crop():
    torch.manual_seed(0)
    one = torch.arange(3 * 20 * 24, dtype=torch.float32).reshape(1, 3, 20, 24)
    x = one.repeat(32, 1, 1, 1)  # the same frame 32 times
    out, shifts = random_shift(x, 4, generator=torch.Generator().manual_seed(1), return_shifts=True)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert shifts.min() >= 0 and shifts.max() <= 8
    assert len({tuple(s) for s in shifts.tolist()}) > 10  # offsets drawn per sample
    distinct = {out[i].numpy().tobytes() for i in range(32)}
    assert len(distinct) == len({tuple(s) for s in shifts.tolist()})  # different offsets, different frames
    padded = torch.nn.functional.pad(one, (4, 4, 4, 4), mode="replicate")[0]
    for i in range(32):
        dy, dx = shifts[i].tolist()
        torch.testing.assert_close(out[i], padded[:, dy:dy + 20, dx:dx + 24], rtol=0, atol=0)
    frames = _frames(4).permute(0, 3, 1, 2)  # uint8, not contiguous (as the replay buffer's (B, H, W, C) frames)
    u8, shifts = random_shift(frames, 4, generator=torch.Generator().manual_seed(2), return_shifts=True)
    assert u8.dtype == torch.uint8 and u8.shape == (4, 3, 32, 32)
    padded = torch.nn.functional.pad(frames.float(), (4, 4, 4, 4), mode="replicate")
    for i, (dy, dx) in enumerate(shifts.tolist()):
        assert torch.equal(u8[i].float(), padded[i, :, dy:dy + 32, dx:dx + 32])
    assert random_shift(x, 0) is x
    with pytest.raises(ValueError, match="B, C, H, W"):
        random_shift(x[0], 4)


def test_spatial_softmax_finds_the_peak_and_embedding_shapes():
    x = torch.full((2, 3, 9, 9), -10.0)
    x[0, :, 0, 8] = 10.0  # top right: x=+1, y=-1
    x[1, :, 8, 0] = 10.0  # bottom left: x=-1, y=+1
    kp = SpatialSoftmax()(x)
    assert kp.shape == (2, 6)
    torch.testing.assert_close(kp[0, :3], torch.ones(3), atol=1e-3, rtol=0)
    torch.testing.assert_close(kp[0, 3:], -torch.ones(3), atol=1e-3, rtol=0)
    torch.testing.assert_close(kp[1, :3], -torch.ones(3), atol=1e-3, rtol=0)
    assert SpatialEmbedding(3, 9, 9, num_features=8)(x).shape == (2, 24)


@pytest.mark.parametrize("pooling", ["flatten", "spatial_softmax", "spatial_embedding"])
def test_pixel_encoder_two_cameras_plus_state(pooling):
    enc = PixelEncoder({"a": (32, 32, 3), "b": (24, 40, 3)}, state_dim=5, pooling=pooling, feature_dim=16, channels=8)
    z = enc({"a": _frames(4), "b": _frames(4, 24, 40)}, torch.randn(4, 5))
    assert z.shape == (4, 21) and enc.out_dim == 21
    with pytest.raises(ValueError, match="'b'"):
        enc({"a": _frames(4)}, torch.randn(4, 5))
    with pytest.raises(ValueError, match="uint8"):
        enc({"a": _frames(4).float(), "b": _frames(4, 24, 40)}, torch.randn(4, 5))


def test_pretrained_encoder_from_a_local_weights_file(tmp_path):
    torch.manual_seed(3)
    source = ResNet10(3, width=8)
    path = tmp_path / "resnet10.pt"
    torch.save(source.state_dict(), path)  # the test makes its own "pretrained" weights
    enc = PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", channels=8, weights=str(path), freeze=True,
                       pooling="spatial_softmax")
    for k, v in source.state_dict().items():
        torch.testing.assert_close(enc.trunks["cam0"].state_dict()[k], v, rtol=0, atol=0)
    assert not any(p.requires_grad for p in enc.trunks["cam0"].parameters())  # frozen trunk
    assert all(p.requires_grad for p in enc.project.parameters())
    with pytest.raises(ConfigError, match="encoder_weights"):
        PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", channels=8)
    with pytest.raises(ConfigError, match="does not exist"):
        PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", weights=str(tmp_path / "nope.pt"))
    with pytest.raises(ConfigError, match="do not fit"):
        PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", channels=16, weights=str(path))
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ConfigError, match="cannot be read"):
        PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", channels=8, weights=str(tmp_path / "junk.pt"))
    wrong = tmp_path / "drq.pt"
    torch.save(DrQConv(3, 8).state_dict(), wrong)
    with pytest.raises(ConfigError, match="missing"):
        PixelEncoder({"cam": (64, 64, 3)}, encoder="resnet10", channels=8, weights=str(wrong))


def test_shared_encoder_critic_trains_it_actor_gradient_stopped():
    torch.manual_seed(0)
    enc = PixelEncoder({"cam": (32, 32, 3)}, state_dim=2, feature_dim=16, channels=8, augment_pad=4)
    actor, critic = torch.nn.Linear(enc.out_dim, 2), torch.nn.Linear(enc.out_dim, 1)
    imgs, state = {"cam": _frames(8)}, torch.randn(8, 2)
    actor(enc(imgs, state, detach=True)).pow(2).mean().backward()
    assert all(p.grad is None for p in enc.parameters())  # the actor's loss does not reach the encoder
    assert actor.weight.grad is not None
    critic(enc(imgs, state)).pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.trunks.parameters())
    enc.eval()  # no augmentation when evaluating: deterministic features
    torch.testing.assert_close(enc(imgs, state), enc(imgs, state), rtol=0, atol=0)
