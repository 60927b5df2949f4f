"""Fake secrets and hostile markup planted by the safety end-to-end tests. None is real.

``LEAKS`` are the distinctive parts that must never reach an output file or the terminal (the
published prefix, such as ``hf_``, may stay as a hint).
"""

from __future__ import annotations

HF_TOKEN = "hf_Pl4ntedHfT0kenAbCdEfGhIjKlMnOpQr"
GITHUB_TOKEN = "ghp_Pl4ntedGhT0ken0123456789abcdefghij"
URL_PASSWORD = "Pl4ntedUrlPassw0rd"
URL_WITH_PASSWORD = f"https://deploy:{URL_PASSWORD}@artifacts.example/simple"
BEARER = "Pl4ntedBearerT0ken1234567890"
AWS_KEY_ID = "AKIAPLANTED0KEY12345"
AWS_SECRET = "Pl4ntedAwsSecretKeyAbCdEfGhIjKlMnOpQrSt"
PASSWORD = "Pl4ntedPassw0rd"
PLAIN_TOKEN = "Pl4ntedPlainLookingValue"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEPl4ntedPemBodyAbCdEf\n-----END PRIVATE KEY-----"
MASTER_PASSWORD = "M4sterPl4ntedPw"
MASTER_ADDR = f"admin:{MASTER_PASSWORD}@10.0.0.5"
"""user:password@host without a scheme (issue 16 item 8)."""

LEAKS = (
    "Pl4ntedHfT0ken",
    "Pl4ntedGhT0ken",
    URL_PASSWORD,
    BEARER,
    "PLANTED0KEY12345",
    AWS_SECRET,
    PASSWORD,
    PLAIN_TOKEN,
    "MIIEPl4ntedPemBody",
    MASTER_PASSWORD,
)

MARKUP = "<script>alert('pf')</script><img src=x onerror=alert(1)>\"'><svg onload=alert(2)></title></pre>"
"""Hostile markup: must come out escaped wherever it lands in the HTML."""

HOSTNAME = f"gpu-node<script>alert('host')</script>{MARKUP}"
GPU_NAME = "NVIDIA H100 <script>alert('gpu')</script><img src=x onerror=alert(1)>\"'></pre>"
"""Hostile markup in a GPU name that fits NVML's name buffer (NVML_DEVICE_NAME_V2_BUFFER_SIZE, 96 bytes)."""

ENVIRONMENT = {
    "HF_TOKEN": HF_TOKEN,
    "GITHUB_TOKEN": GITHUB_TOKEN,
    "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
    "NCCL_IB_TOKEN": PLAIN_TOKEN,
    "NCCL_PLUGIN_INDEX": URL_WITH_PASSWORD,
    "CUDA_CACHE_NOTE": f"token {HF_TOKEN} {MARKUP}",
    "TORCH_PLANTED_MARKUP": f"<i>env-value</i>{MARKUP}",
    "MASTER_ADDR": MASTER_ADDR,
}
"""Planted in the run's environment: secrets inside and outside the allow-list, and markup."""
