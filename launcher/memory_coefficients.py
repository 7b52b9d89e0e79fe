"""Measured activation bytes of one transformer call, per token and per block kind, at each family's published
width in fp32 on the CPU (written by ``scripts/calibrate_memory.py --write``; docs/memory.md#calibration).

``saved``: the activations a forward with gradients keeps for the backward; ``peak``: that forward's peak (``saved``
plus the working set of the block running); ``infer``: the working set of a forward without gradients. Each is
``img * image_tokens + txt * text_tokens + const`` bytes for one row; the root entry is the embedders and the output
head. ``launcher/memory_plan.py`` multiplies by rows and depth, scales by the compute dtype's size and, for other
widths, by the width ratio.

``VAE_DECODE_BYTES``: the VAE decoder's working set per output pixel of one image (one frame for the video VAEs, which
decode frame by frame), without gradients (``infer``) and with them (``grad``: the adjoint methods decode with
gradients to differentiate the reward), fp32; the SD3.5 VAE is FLUX.1's architecture.
"""

ACTIVATION_BYTES = {
    "flux": {
        "double": {
            "infer": {"const": -2080597, "img": 132808, "txt": 120171},
            "peak": {"const": -688128, "img": 294560, "txt": 319936},
            "saved": {"const": 221184, "img": 296240, "txt": 296240},
        },
        "root": {
            "infer": {"const": 4059307, "img": 28552, "txt": 7019},
            "peak": {"const": 333483, "img": 48336, "txt": 12331},
            "saved": {"const": 115712, "img": 37128, "txt": 16384},
        },
        "single": {
            "infer": {"const": -3862869, "img": 154704, "txt": 172011},
            "peak": {"const": -2721280, "img": 298424, "txt": 338880},
            "saved": {"const": 61440, "img": 259368, "txt": 271656},
        },
    },
    "qwenimage": {
        "block": {
            "infer": {"const": -881152, "img": 155656, "txt": 128256},
            "peak": {"const": 454485, "img": 293912, "txt": 295253},
            "saved": {"const": 2318336, "img": 295732, "txt": 295220},
        },
        "root": {
            "infer": {"const": 3259904, "img": 30856, "txt": 18176},
            "peak": {"const": -730453, "img": 48288, "txt": 43627},
            "saved": {"const": 62464, "img": 37128, "txt": 28672},
        },
    },
    "sd3": {
        "block_dual": {
            "infer": {"const": -6581248, "img": 8080, "txt": 41920},
            "peak": {"const": 615765, "img": 214816, "txt": 153237},
            "saved": {"const": 135168, "img": 215632, "txt": 153904},
        },
        "block_joint": {
            "infer": {"const": -6255445, "img": 824, "txt": 37675},
            "peak": {"const": 312149, "img": 153288, "txt": 156245},
            "saved": {"const": 110592, "img": 153904, "txt": 153904},
        },
        "block_joint_last": {
            "infer": {"const": 2993152, "img": 63824, "txt": 23424},
            "peak": {"const": 566784, "img": 151240, "txt": 65984},
            "saved": {"const": 67584, "img": 153904, "txt": 74024},
        },
        "root": {
            "infer": {"const": 1750528, "img": 15464, "txt": 1792},
            "peak": {"const": -585045, "img": 24768, "txt": 7915},
            "saved": {"const": 52224, "img": 18696, "txt": 16384},
        },
    },
    "wan": {
        "block": {
            "infer": {"const": 3679915, "img": 74768, "txt": -17877},
            "peak": {"const": -14848, "img": 208712, "txt": 24896},
            "saved": {"const": 49152, "img": 208004, "txt": 30724},
        },
        "root": {
            "infer": {"const": 1464491, "img": 15304, "txt": 9259},
            "peak": {"const": 43520, "img": 18136, "txt": 18560},
            "saved": {"const": 31744, "img": 18696, "txt": 28672},
        },
    },
    "wan14b": {
        "block": {
            "infer": {"const": -2279595, "img": 144280, "txt": 31381},
            "peak": {"const": -745472, "img": 562304, "txt": 86656},
            "saved": {"const": 163840, "img": 562532, "txt": 102404},
        },
        "root": {
            "infer": {"const": 4432555, "img": 51104, "txt": 31403},
            "peak": {"const": -384512, "img": 83768, "txt": 57472},
            "saved": {"const": 103424, "img": 61704, "txt": 57344},
        },
    },
}
VAE_DECODE_BYTES = {
    "flux": {"grad": 23338, "infer": 3888},
    "qwenimage": {"grad": 31229, "infer": 8133},
    "wan": {"grad": 31218, "infer": 8118},
}
