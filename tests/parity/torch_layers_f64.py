"""torch_layers_f64.py — PyTorch's half of the f64 layer/loss/optimizer parity test (issue 14;
tests/lua/test_nn_torch_parity.lua is stitch's half, tests/run_torch_layers.sh runs both).

  python3 torch_layers_f64.py OUT.safetensors [SEED]

For every case NAME (all in float64) it builds the PyTorch module or function with fixed random
weights, runs the forward on fixed inputs and the backward with a fixed upstream gradient, and
writes into one safetensors file:
  NAME/<state_dict key>      the module's parameters and buffers before the forward (PyTorch names)
  NAME/@in1, @in2, ...        the inputs (class and embedding indices: 0-based, as PyTorch)
  NAME/@out1, ...             the outputs
  NAME/@gout1, ...            the upstream gradients given to backward (one per output)
  NAME/@gin1, ...             the gradients of the inputs that require grad (same numbering)
  NAME/@grad/<key>            the gradients of the parameters
  NAME/@after/<key>           buffers after the forward (BatchNorm's running statistics in train mode)
Optimizers: NAME/<key> the tiny model's initial weights, NAME/@x, NAME/@y its data and
NAME/@step<k>/<key> the weights after step k, NAME/@loss the loss of each step.
Schedulers: NAME/@lr, the lr after construction and after each step.
tests/parity/torch_layers_f64.safetensors is this file for SEED 0 (so the Lua test also runs
where torch is missing); regenerate it with this command.

No `safetensors` package is needed: the format (8-byte little-endian header length, a JSON header,
the raw data) is written by st_format.py with json and struct.
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
from st_format import save  # noqa: E402 (tests/parity is the script's directory)


def rn(*shape):
    return torch.randn(*shape)


def perturb(m):
    """No parameter at its initial value (ones, zeros), running variances positive."""
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        for k, b in m.named_buffers():
            if k.endswith("running_mean"):
                b.copy_(torch.randn_like(b) * 0.5)
            elif k.endswith("running_var"):
                b.copy_(torch.rand_like(b) + 0.5)


OUT = {}


def record(name, fn, ins, grad_ins, module=None, after=False):
    """ins: list of tensors; grad_ins: indices (0-based) of inputs that require grad."""
    if module is not None:
        for k, v in module.state_dict().items():
            OUT["%s/%s" % (name, k)] = v.clone()
    xs = []
    for i, x in enumerate(ins):
        x = x.clone()
        if i in grad_ins:
            x.requires_grad_(True)
        xs.append(x)
        OUT["%s/@in%d" % (name, i + 1)] = x.detach().clone()
    outs = fn(*xs)
    if not isinstance(outs, (tuple, list)):
        outs = [outs]
    gouts = [torch.randn_like(y) for y in outs]
    for i, (y, g) in enumerate(zip(outs, gouts)):
        OUT["%s/@out%d" % (name, i + 1)] = y.detach().clone()
        OUT["%s/@gout%d" % (name, i + 1)] = g
    torch.autograd.backward(list(outs), gouts)
    for i in grad_ins:
        OUT["%s/@gin%d" % (name, i + 1)] = xs[i].grad.clone()
    if module is not None:
        for k, p in module.named_parameters():
            OUT["%s/@grad/%s" % (name, k)] = p.grad.clone()
        if after:
            for k, b in module.named_buffers():
                OUT["%s/@after/%s" % (name, k)] = b.clone()


def mod(name, m, ins, grad_ins=(0,), train=True, call=None, after=False):
    perturb(m)
    m.train(train)
    record(name, call(m) if call else m, ins, list(grad_ins), module=m, after=after)


def layers():
    # normalization
    mod("batchnorm1d_train", nn.BatchNorm1d(3), [rn(4, 3, 5) * 2 + 1], after=True)
    mod("batchnorm1d_2d_train", nn.BatchNorm1d(3, momentum=0.3), [rn(6, 3) - 1], after=True)
    mod("batchnorm1d_cumulative", nn.BatchNorm1d(3, momentum=None), [rn(5, 3, 2)], after=True)
    mod("batchnorm1d_eval", nn.BatchNorm1d(3), [rn(4, 3, 5)], train=False)
    mod("batchnorm2d_train", nn.BatchNorm2d(2, eps=1e-3), [rn(3, 2, 4, 4) * 3], after=True)
    mod("batchnorm2d_eval", nn.BatchNorm2d(2), [rn(3, 2, 4, 4)], train=False)
    mod("batchnorm2d_nostats", nn.BatchNorm2d(2, affine=False, track_running_stats=False), [rn(3, 2, 3, 3)])
    mod("batchnorm2d_nostats_eval", nn.BatchNorm2d(2, affine=False, track_running_stats=False), [rn(3, 2, 3, 3)],
        train=False)  # no running statistics: the batch's, also in eval
    mod("groupnorm", nn.GroupNorm(2, 4), [rn(2, 4, 3, 3)])
    mod("instancenorm2d", nn.InstanceNorm2d(3, affine=True), [rn(2, 3, 4, 4)])
    mod("instancenorm2d_noaffine", nn.InstanceNorm2d(3), [rn(2, 3, 4, 5)])
    mod("instancenorm1d", nn.InstanceNorm1d(3, affine=True), [rn(2, 3, 6)])
    mod("layernorm", nn.LayerNorm([4, 5]), [rn(2, 3, 4, 5)])
    mod("layernorm_noaffine", nn.LayerNorm(5, eps=1e-3, elementwise_affine=False), [rn(3, 5) * 4])
    # convolution and pooling
    mod("conv2d_stride_pad_groups", nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), [rn(2, 4, 7, 7)])
    mod("conv2d_dilation_rect", nn.Conv2d(3, 4, (3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 1)),
        [rn(2, 3, 6, 7)])
    mod("conv2d_depthwise_same", nn.Conv2d(3, 3, 3, padding="same", dilation=2, groups=3, bias=False),
        [rn(1, 3, 6, 5)])
    # stride 1: the input gradient as a convolution of the output gradient (F.conv2d's Conv2dFn),
    # with uneven "same" padding and dilation; a padding wider than the kernel takes the generic view
    mod("conv2d_same_even_kernel", nn.Conv2d(3, 5, (2, 4), padding="same", dilation=(1, 2)), [rn(2, 3, 5, 6)])
    mod("conv2d_1x1_wide_pad", nn.Conv2d(2, 3, 1, padding=1), [rn(2, 2, 4, 3)])
    # stride 2 and 3: the input gradient by col2im (phases of the stride), input rows and columns
    # no window reaches; a dilation the stride divides (phases no tap reaches); a strided 1x1
    mod("conv2d_stride_uncovered", nn.Conv2d(2, 3, 3, stride=(2, 3)), [rn(2, 2, 8, 10)])
    mod("conv2d_stride_dilation", nn.Conv2d(3, 4, 3, stride=(2, 3), padding=(2, 1), dilation=(2, 1)),
        [rn(2, 3, 9, 10)])
    mod("conv2d_1x1_stride2_groups", nn.Conv2d(4, 6, 1, stride=2, groups=2, bias=False), [rn(2, 4, 7, 6)])
    mod("adaptive_avgpool2d_uneven", nn.AdaptiveAvgPool2d((3, 2)), [rn(2, 3, 7, 5)])
    mod("adaptive_avgpool2d_global", nn.AdaptiveAvgPool2d(1), [rn(2, 3, 4, 6)])
    mod("maxpool2d", nn.MaxPool2d(2), [rn(2, 2, 6, 6)])
    mod("maxpool2d_pad_ceil", nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), [rn(2, 2, 6, 7)])
    mod("avgpool2d_pad_ceil", nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True), [rn(2, 2, 6, 7)])
    mod("avgpool2d_pad_ceil_nocount", nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                   count_include_pad=False), [rn(2, 2, 6, 7)])
    # the 1-D pools (the 2-D ones on a height-1 view)
    mod("maxpool1d_pad_ceil", nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True), [rn(2, 3, 10)])
    mod("avgpool1d_pad_ceil_nocount", nn.AvgPool1d(4, stride=3, padding=2, ceil_mode=True,
                                                   count_include_pad=False), [rn(2, 3, 11)])
    mod("avgpool1d_unbatched", nn.AvgPool1d(2), [rn(3, 7)])
    mod("adaptive_avgpool1d_uneven", nn.AdaptiveAvgPool1d(4), [rn(2, 3, 7)])
    # conv1d (conv2d on a height-1 view), conv_transpose2d (conv2d's input gradient), interpolate
    mod("conv1d_stride_pad_groups", nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), [rn(2, 4, 9)])
    mod("conv1d_same_dilation", nn.Conv1d(3, 5, 4, padding="same", dilation=2), [rn(2, 3, 10)])
    mod("conv1d_unbatched_valid", nn.Conv1d(2, 3, 2, padding="valid", bias=False), [rn(2, 7)])
    mod("convt2d_stride_pad_outpad", nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
        [rn(2, 3, 4, 5)])
    mod("convt2d_groups", nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), [rn(2, 4, 3, 4)])
    mod("convt2d_dilation_rect", nn.ConvTranspose2d(2, 3, (3, 2), stride=(1, 2), padding=(2, 0),
                                                    output_padding=(1, 1), dilation=(2, 1)), [rn(2, 2, 4, 5)])
    mod("convt2d_wide_pad", nn.ConvTranspose2d(2, 2, 2, stride=3, padding=2, bias=False), [rn(1, 2, 4, 3)])
    mod("convt2d_unbatched", nn.ConvTranspose2d(2, 3, (2, 3), stride=(2, 1), padding=(0, 1)), [rn(2, 3, 4)])

    def interp(name, x, **kw):
        record(name, lambda t: F.interpolate(t, **kw), [x], [0])
    interp("interp_nearest_x2", rn(2, 3, 4, 5), scale_factor=2)
    interp("interp_nearest_size", rn(2, 2, 5, 6), size=(7, 4))  # 5 -> 7 up, 6 -> 4 down
    interp("interp_nearest_scale_1_5", rn(1, 2, 4, 6), scale_factor=1.5)
    interp("interp_nearest_x3_1d", rn(2, 3, 5), scale_factor=3)
    interp("interp_bilinear_up", rn(2, 2, 4, 5), size=(7, 9), mode="bilinear", align_corners=False)
    interp("interp_bilinear_down", rn(2, 2, 7, 9), size=(4, 5), mode="bilinear", align_corners=False)
    interp("interp_bilinear_ac_up", rn(2, 2, 4, 5), size=(7, 9), mode="bilinear", align_corners=True)
    interp("interp_bilinear_ac_down", rn(2, 2, 7, 9), size=(3, 4), mode="bilinear", align_corners=True)
    interp("interp_bilinear_scale", rn(1, 2, 5, 6), scale_factor=(2, 0.5), mode="bilinear")
    interp("interp_linear_1d", rn(2, 3, 5), size=8, mode="linear")
    interp("interp_bicubic_up", rn(2, 2, 4, 5), size=(7, 9), mode="bicubic", align_corners=False)
    interp("interp_bicubic_down", rn(2, 2, 7, 9), size=(4, 5), mode="bicubic", align_corners=False)
    interp("interp_bicubic_ac", rn(2, 2, 4, 5), size=(6, 3), mode="bicubic", align_corners=True)
    interp("interp_bicubic_scale", rn(1, 2, 5, 6), scale_factor=(2, 0.5), mode="bicubic")
    interp("interp_area_down", rn(2, 2, 7, 9), size=(3, 4), mode="area")
    interp("interp_area_up_1d", rn(2, 3, 5), size=8, mode="area")
    mod("upsample_bilinear_x2", nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), [rn(2, 2, 3, 4)])
    # attention
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)  # True: may not attend
    mod("mha_causal", nn.MultiheadAttention(8, 2), [rn(4, 2, 8), rn(4, 2, 8), rn(4, 2, 8)],
        grad_ins=(0, 1, 2), call=lambda m: lambda q, k, v: m(q, k, v, attn_mask=causal))
    kpm = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
    mod("mha_batch_first_padding", nn.MultiheadAttention(6, 3, batch_first=True),
        [rn(2, 3, 6), rn(2, 5, 6), rn(2, 5, 6)], grad_ins=(0, 1, 2),
        call=lambda m: lambda q, k, v: m(q, k, v, key_padding_mask=kpm, average_attn_weights=False))
    mod("encoder_post_norm", nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0),
        [rn(4, 2, 8)], call=lambda m: lambda x: m(x, src_mask=causal))
    mod("encoder_norm_first_gelu", nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                                              activation="gelu", batch_first=True,
                                                              norm_first=True), [rn(2, 5, 8)])
    # F.scaled_dot_product_attention is not in torch 1.13: its explicit formula
    def sdpa(q, k, v, mask=None, scale=None):  # mask: bool, True = may attend (F.sdpa's convention)
        s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        return torch.softmax(s, -1) @ v
    record("sdpa_causal", lambda q, k, v: sdpa(q, k, v, ~causal), [rn(2, 3, 4, 5), rn(2, 3, 4, 5), rn(2, 3, 4, 6)],
           [0, 1, 2])
    allow = torch.tensor([[True, False, True, True, False], [True, True, False, True, True],
                          [False, True, True, True, True]])
    record("sdpa_mask_scale", lambda q, k, v: sdpa(q, k, v, allow, 0.3), [rn(2, 3, 4), rn(2, 5, 4), rn(2, 5, 3)],
           [0, 1, 2])
    # a float mask (a learned bias: it gets a gradient), broadcast over the batch
    record("sdpa_float_mask", lambda q, k, v, m: torch.softmax(q @ k.transpose(-2, -1) / 2 + m, -1) @ v,
           [rn(2, 3, 4), rn(2, 5, 4), rn(2, 5, 3), rn(3, 5)], [0, 1, 2, 3])
    # MultiheadAttention without weights: key padding and attention masks through the attention op
    mod("mha_padding_no_weights", nn.MultiheadAttention(6, 3, batch_first=True),
        [rn(2, 3, 6), rn(2, 5, 6), rn(2, 5, 6)], grad_ins=(0, 1, 2),
        call=lambda m: lambda q, k, v: m(q, k, v, key_padding_mask=kpm, attn_mask=allow.logical_not(),
                                         need_weights=False)[0])
    # recurrent: 2 layers, batch_first, bidirectional, with initial states
    mod("lstm", nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True),
        [rn(2, 5, 3), rn(4, 2, 4), rn(4, 2, 4)], grad_ins=(0, 1, 2),
        call=lambda m: lambda x, h, c: (lambda y, hc: (y, hc[0], hc[1]))(*m(x, (h, c))))
    mod("gru", nn.GRU(3, 4, num_layers=2, batch_first=True, bidirectional=True),
        [rn(2, 5, 3), rn(4, 2, 4)], grad_ins=(0, 1), call=lambda m: lambda x, h: m(x, h))
    mod("lstm_seq_first", nn.LSTM(2, 3), [rn(4, 2, 2)], call=lambda m: lambda x: m(x)[0])
    # embedding: index 2 is padding (0-based; 3 in stitch)
    mod("embedding_padding", nn.Embedding(6, 3, padding_idx=2), [torch.tensor([[0, 2, 5, 2], [1, 2, 3, 0]])],
        grad_ins=())
    # activations (inputs spread over [-4, 4], none at a kink)
    x = lambda: rn(3, 4, 5) * 2.5
    mod("leaky_relu", nn.LeakyReLU(0.2), [x()])
    mod("elu", nn.ELU(alpha=0.7), [x()])
    mod("softplus", nn.Softplus(beta=2, threshold=3), [x()])
    mod("mish", nn.Mish(), [x()])
    mod("hardswish", nn.Hardswish(), [x()])
    mod("hardsigmoid", nn.Hardsigmoid(), [x()])
    mod("prelu", nn.PReLU(num_parameters=4), [x()])
    mod("prelu_single", nn.PReLU(), [x()])
    mod("gelu", nn.GELU(), [x()])
    mod("gelu_tanh", nn.GELU(approximate="tanh"), [x()])


def losses():
    def loss(name, fn, ins, grad_ins=(0,)):
        record(name, fn, ins, list(grad_ins))

    t5 = torch.tensor([0, 3, 1, 2, 1])
    w4 = torch.rand(4) + 0.5
    # class targets; ignore_index 1 (2 in stitch: indices are 1-based there)
    loss("ce_ignore_smoothing", lambda x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=1,
                                                               label_smoothing=0.2),
         [rn(5, 4), t5, w4])
    loss("ce_ignore_smoothing_sum", lambda x, t: F.cross_entropy(x, t, ignore_index=1, label_smoothing=0.1,
                                                                 reduction="sum"), [rn(5, 4), t5])
    loss("ce_kdim_none", lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.05),
         [rn(2, 3, 4), torch.tensor([[0, 2, 1, 2], [1, 1, 0, 2]])])
    loss("ce_prob_targets", lambda x, p, w: F.cross_entropy(x, p, weight=w, label_smoothing=0.1),
         [rn(5, 4), torch.softmax(rn(5, 4), 1), w4], grad_ins=(0, 1))
    loss("ce_single_sample", lambda x, t: F.cross_entropy(x, t), [rn(5), torch.tensor(3)])
    # no weight, smoothing or ignore_index
    loss("ce_plain_mean", lambda x, t: F.cross_entropy(x, t), [rn(5, 4), t5])
    loss("ce_plain_kdim_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
         [rn(2, 3, 4), torch.tensor([[0, 2, 1, 2], [1, 1, 0, 2]])])
    loss("ce_plain_none", lambda x, t: F.cross_entropy(x, t, reduction="none"), [rn(5, 4), t5])
    loss("nll_ignore_weight", lambda x, t, w: F.nll_loss(torch.log_softmax(x, 1), t, weight=w, ignore_index=1),
         [rn(5, 4), t5, w4])
    loss("mse", lambda a, b: F.mse_loss(a, b), [rn(3, 4), rn(3, 4)], grad_ins=(0, 1))
    loss("l1_sum", lambda a, b: F.l1_loss(a, b, reduction="sum"), [rn(3, 4), rn(3, 4)], grad_ins=(0, 1))
    loss("smooth_l1", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), [rn(4, 5), rn(4, 5)], grad_ins=(0, 1))
    loss("huber", lambda a, b: F.huber_loss(a, b, delta=1.5), [rn(4, 5) * 2, rn(4, 5)], grad_ins=(0, 1))
    loss("kl_div_batchmean", lambda a, b: F.kl_div(a, b, reduction="batchmean"),
         [torch.log_softmax(rn(3, 5), 1), torch.softmax(rn(3, 5), 1)], grad_ins=(0, 1))
    loss("kl_div_log_target", lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True),
         [torch.log_softmax(rn(3, 5), 1), torch.log_softmax(rn(3, 5), 1)], grad_ins=(0, 1))
    loss("bce", lambda p, y, w: F.binary_cross_entropy(p, y, weight=w),
         [torch.rand(4, 3) * 0.9 + 0.05, torch.rand(4, 3), torch.rand(4, 3)])
    loss("bce_with_logits", lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, weight=w,
                                                                                  pos_weight=pw),
         [rn(4, 3) * 3, torch.rand(4, 3), torch.rand(4, 3), torch.rand(3) + 0.5], grad_ins=(0, 1))
    # the loss modules (each passes its options to the functional form)
    loss("m_cross_entropy", lambda x, t, w: nn.CrossEntropyLoss(weight=w, ignore_index=1, label_smoothing=0.2)(x, t),
         [rn(5, 4), t5, w4])
    loss("m_nll", lambda x, t, w: nn.NLLLoss(weight=w, ignore_index=1, reduction="sum")(torch.log_softmax(x, 1), t),
         [rn(5, 4), t5, w4])
    loss("m_mse_sum", lambda a, b: nn.MSELoss(reduction="sum")(a, b), [rn(3, 4), rn(3, 4)], grad_ins=(0, 1))
    loss("m_l1_none", lambda a, b: nn.L1Loss(reduction="none")(a, b), [rn(3, 4), rn(3, 4)], grad_ins=(0, 1))
    loss("m_smooth_l1", lambda a, b: nn.SmoothL1Loss(beta=0.3)(a, b), [rn(4, 5), rn(4, 5)], grad_ins=(0, 1))
    loss("m_huber_sum", lambda a, b: nn.HuberLoss(delta=0.7, reduction="sum")(a, b), [rn(4, 5) * 2, rn(4, 5)],
         grad_ins=(0, 1))
    loss("m_kl_div", lambda a, b: nn.KLDivLoss(reduction="batchmean", log_target=True)(a, b),
         [torch.log_softmax(rn(3, 5), 1), torch.log_softmax(rn(3, 5), 1)], grad_ins=(0, 1))
    loss("m_bce", lambda p, y, w: nn.BCELoss(weight=w, reduction="sum")(p, y),
         [torch.rand(4, 3) * 0.9 + 0.05, torch.rand(4, 3), torch.rand(4, 3)])
    loss("m_bce_with_logits", lambda x, y, pw: nn.BCEWithLogitsLoss(pos_weight=pw)(x, y),
         [rn(4, 3) * 3, torch.rand(4, 3), torch.rand(3) + 0.5], grad_ins=(0, 1))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


OPTIMS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.05, betas=(0.8, 0.9), weight_decay=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.05, amsgrad=True),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.05, amsgrad=True),
    "adam_param_groups": lambda p: torch.optim.Adam([{"params": p[:2], "lr": 0.02, "weight_decay": 0.1},
                                                     {"params": p[2:]}], lr=0.05),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9),
    "rmsprop_centered_momentum": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True,
                                                               weight_decay=0.01),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.01,
                                             initial_accumulator_value=0.1),
}
STEPS = 4


def optims():
    x, y = rn(5, 3), rn(5, 2)
    m0 = Tiny()
    for name, make in OPTIMS.items():
        m = Tiny()
        m.load_state_dict(m0.state_dict())
        for k, v in m.state_dict().items():
            OUT["%s/%s" % (name, k)] = v.clone()
        OUT[name + "/@x"], OUT[name + "/@y"] = x, y
        opt = make(list(m.parameters()))
        ls = []
        for s in range(1, STEPS + 1):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            ls.append(loss.item())
            for k, v in m.state_dict().items():
                OUT["%s/@step%d/%s" % (name, s, k)] = v.clone()
        OUT[name + "/@loss"] = torch.tensor(ls)


SCHEDS = {
    "steplr": (lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5), 10),
    "multisteplr": (lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3), 10),
    "cosineannealinglr": (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01), 12),
    "onecyclelr_cos": (lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=10,
                                                                     cycle_momentum=False), 9),
    "onecyclelr_linear": (lambda o: torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, total_steps=12, pct_start=0.25, anneal_strategy="linear", div_factor=10,
        final_div_factor=100, cycle_momentum=False), 11),
    "lambdalr": (lambda o: torch.optim.lr_scheduler.LambdaLR(o, lr_lambda=lambda e: 0.9 ** e + 0.05 * (e % 3)), 10),
    "reducelronplateau": (lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(
        o, factor=0.5, patience=2, threshold=0.01, cooldown=1, min_lr=0.02), 14),
    "reducelronplateau_max_abs": (lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(
        o, mode="max", factor=0.3, patience=1, threshold=0.05, threshold_mode="abs"), 14),
}
# the metrics ReduceLROnPlateau's cases step with (one per epoch)
PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.95, 0.96, 0.94, 0.97, 0.98, 0.99, 0.99, 0.5, 0.6, 0.7, 0.7]


def scheds():
    for name, (make, n) in SCHEDS.items():
        p = nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.1)
        s = make(opt)
        lrs = [opt.param_groups[0]["lr"]]
        for i in range(n):
            opt.step()
            if name.startswith("reducelronplateau"):
                s.step(PLATEAU_METRICS[i])
            else:
                s.step()
            lrs.append(opt.param_groups[0]["lr"])
        OUT[name + "/@lr"] = torch.tensor(lrs)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    seed = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    torch.manual_seed(seed)
    layers()
    losses()
    optims()
    scheds()
    save(sys.argv[1], OUT)
    print("wrote %s (%d tensors, seed %d, torch %s)" % (sys.argv[1], len(OUT), seed, torch.__version__))


if __name__ == "__main__":
    main()
