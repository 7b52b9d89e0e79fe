"""Measured activation bytes of one transformer call, per token and per block kind, at each family's published
width in fp32 on the CPU (written by ``scripts/calibrate_memory.py --write``; docs/memory.md#calibration).

``saved``: the activations a forward with gradients keeps for the backward; ``peak``: that forward's peak (``saved``
plus the working set of the block running); ``infer``: the working set of a forward without gradients;
``saved_lora``, ``peak_lora``: the first two for a LoRA forward (frozen weights, a rank-32 adapter on the attention
projections), which saves about half as much: a frozen linear layer keeps no input for a weight gradient. Each is
``img * image_tokens + txt * text_tokens + const`` bytes for one row; the root entry is the embedders and the output
head. ``launcher/plan/memory_plan.py`` multiplies by rows and depth, scales by the compute dtype's size and, for other
widths, by the width ratio.

``VAE_DECODE_BYTES``: the VAE decoder's working set per output pixel of one image (one frame for the video VAEs, which
decode frame by frame), without gradients (``infer``) and with them (``grad``: the adjoint methods decode with
gradients to differentiate the reward), fp32; the SD3.5 VAE is FLUX.1's architecture.
"""

ACTIVATION_BYTES = {
    "flux": {
        "double": {
            "infer": {"const": -2143061, "img": 131352, "txt": 119019},
            "peak": {"const": -168448, "img": 296648, "txt": 317568},
            "peak_lora": {"const": -2061312, "img": 218544, "txt": 246592},
            "saved": {"const": 221184, "img": 296240, "txt": 296240},
            "saved_lora": {"const": 196608, "img": 161584, "txt": 161584},
        },
        "root": {
            "infer": {"const": 4147371, "img": 30888, "txt": 5867},
            "peak": {"const": -446635, "img": 49080, "txt": 12821},
            "peak_lora": {"const": 98645, "img": 36944, "txt": 13525},
            "saved": {"const": 115712, "img": 37128, "txt": 16384},
            "saved_lora": {"const": 12288, "img": 12296, "txt": 0},
        },
        "single": {
            "infer": {"const": -5047808, "img": 154296, "txt": 183872},
            "peak": {"const": -1628843, "img": 298080, "txt": 341909},
            "peak_lora": {"const": -1272149, "img": 261552, "txt": 280427},
            "saved": {"const": 61440, "img": 259368, "txt": 271656},
            "saved_lora": {"const": 49152, "img": 149160, "txt": 161448},
        },
    },
    "qwenimage": {
        "block": {
            "infer": {"const": -3197099, "img": 147992, "txt": 155541},
            "peak": {"const": 260949, "img": 295304, "txt": 295701},
            "peak_lora": {"const": -1235968, "img": 230544, "txt": 248640},
            "saved": {"const": 2318336, "img": 295732, "txt": 295220},
            "saved_lora": {"const": 2293760, "img": 161076, "txt": 160564},
        },
        "root": {
            "infer": {"const": -411307, "img": 38160, "txt": 21141},
            "peak": {"const": -179029, "img": 49848, "txt": 41707},
            "peak_lora": {"const": -655872, "img": 37352, "txt": 22464},
            "saved": {"const": 62464, "img": 37128, "txt": 28672},
            "saved_lora": {"const": 12288, "img": 12296, "txt": 14340},
        },
    },
    "sd3": {
        "block_dual": {
            "infer": {"const": 24917, "img": 5488, "txt": 8981},
            "peak": {"const": 430763, "img": 216128, "txt": 152811},
            "peak_lora": {"const": 463702, "img": 130824, "txt": 88278},
            "saved": {"const": 135168, "img": 215632, "txt": 153904},
            "saved_lora": {"const": 122880, "img": 130640, "txt": 86832},
        },
        "block_joint": {
            "infer": {"const": 437760, "img": -1272, "txt": 6016},
            "peak": {"const": 742742, "img": 151936, "txt": 153430},
            "peak_lora": {"const": 293547, "img": 86816, "txt": 88427},
            "saved": {"const": 110592, "img": 153904, "txt": 153904},
            "saved_lora": {"const": 98304, "img": 86832, "txt": 86832},
        },
        "block_joint_last": {
            "infer": {"const": -2689536, "img": 63880, "txt": 56640},
            "peak": {"const": 162133, "img": 154640, "txt": 68245},
            "peak_lora": {"const": -39595, "img": 112032, "txt": 51733},
            "saved": {"const": 67584, "img": 153904, "txt": 74024},
            "saved_lora": {"const": 55296, "img": 86832, "txt": 55976},
        },
        "root": {
            "infer": {"const": 551253, "img": 17712, "txt": 3413},
            "peak": {"const": -382464, "img": 24728, "txt": 6144},
            "peak_lora": {"const": 38400, "img": 18024, "txt": 5504},
            "saved": {"const": 52224, "img": 18696, "txt": 16384},
            "saved_lora": {"const": 6144, "img": 6408, "txt": 0},
        },
    },
    "wan": {
        "block": {
            "infer": {"const": -430592, "img": 78760, "txt": 5696},
            "peak": {"const": 87211, "img": 207160, "txt": 25963},
            "peak_lora": {"const": 744789, "img": 157824, "txt": 13717},
            "saved": {"const": 49152, "img": 208004, "txt": 30724},
            "saved_lora": {"const": 49152, "img": 123780, "txt": 24836},
        },
        "root": {
            "infer": {"const": -1144661, "img": 20776, "txt": 13291},
            "peak": {"const": -446976, "img": 25864, "txt": 18432},
            "peak_lora": {"const": -650411, "img": 20360, "txt": 17365},
            "saved": {"const": 31744, "img": 18696, "txt": 28672},
            "saved_lora": {"const": 6144, "img": 6408, "txt": 6144},
        },
    },
    "wan14b": {
        "block": {
            "infer": {"const": -1509717, "img": 131216, "txt": 52139},
            "peak": {"const": 229376, "img": 561376, "txt": 78016},
            "peak_lora": {"const": 474112, "img": 398608, "txt": 51840},
            "saved": {"const": 163840, "img": 562532, "txt": 102404},
            "saved_lora": {"const": 163840, "img": 344164, "txt": 82180},
        },
        "root": {
            "infer": {"const": -256683, "img": 62496, "txt": 30741},
            "peak": {"const": 64683, "img": 83128, "txt": 60203},
            "peak_lora": {"const": -293717, "img": 62616, "txt": 51371},
            "saved": {"const": 103424, "img": 61704, "txt": 57344},
            "saved_lora": {"const": 20480, "img": 20744, "txt": 20480},
        },
    },
}
VAE_DECODE_BYTES = {
    "flux": {"grad": 23339, "infer": 3888},
    "qwenimage": {"grad": 31231, "infer": 8129},
    "wan": {"grad": 31221, "infer": 8118},
}
