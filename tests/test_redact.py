"""Redaction: nothing personal survives a report or an exported notebook."""

from __future__ import annotations

import ast
import getpass
import socket
from pathlib import Path

import nbformat
import pytest

from cudadiag import classify
from cudadiag.incident import EnvInfo, ErrorInfo, Frame, Incident, Observed, RunInfo, Signature
from cudadiag.privacy.redact import SHARED_ACCOUNTS, Redactor, redact, secret_env_values
from cudadiag.repro.notebook import export_notebook
from cudadiag.repro.report import render_report

USER = getpass.getuser()
HOST = socket.gethostname()
HOME = str(Path.home())

SECRETS = {
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWx",
    "openai": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "github": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "email": "jane.doe+ml@example-corp.com",
    "ipv4": "192.168.17.42",
    "ipv6": "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "password": "password=hunter2hunter2",
}

SAMPLE = "\n".join([
    f"Traceback: File \"{HOME}/projects/secret-model/train.py\", line 3",
    f"host {HOST} user {USER} at {USER}@{HOST}:~$",
    f"data from /mnt/{USER}/datasets/private/images/batch_0001.pt",
    "docs at https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    *SECRETS.values(),
    "HF_TOKEN='hf_ZZZZZZZZZZZZZZZZZZZZZZZZ' api_key: abcdef123456",
])


def test_nothing_personal_survives():
    out = Redactor(project=None)(SAMPLE)
    for name, secret in SECRETS.items():
        assert secret not in out, name
    assert HOME not in out and "hf_ZZZZ" not in out and "abcdef123456" not in out
    for word in (USER, HOST):
        if len(word) >= 2 and word not in ("localhost", *SHARED_ACCOUNTS):
            assert not any(part == word for part in _words(out)), word
    assert "~/projects/secret-model/train.py" in out
    assert ".../images/batch_0001.pt" in out  # absolute paths outside the project shortened
    assert "https://docs.nvidia.com/cuda/cuda-runtime-api" in out  # URLs stay usable


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[\w-]+", text)


def test_paths_inside_the_project_become_relative(tmp_path):
    scrub = Redactor(project=str(tmp_path))
    assert scrub(f"{tmp_path}/src/model.py:12") == "./src/model.py:12"


def test_timestamps_and_versions_are_not_mistaken_for_addresses():
    assert redact("at 12:44:31 torch 2.13.0") == "at 12:44:31 torch 2.13.0"
    assert Redactor(addresses=False)("cuDNN 9.1.0.70") == "cuDNN 9.1.0.70"


def _incident(text: str) -> Incident:
    frame = Frame(file=f"{HOME}/work/train.py", line=3, function="<module>",
                  source=f"token = '{SECRETS['hf']}'")
    return Incident(
        error=ErrorInfo(type="RuntimeError", message=text.splitlines()[0], text=text,
                        traceback=[frame], reported_at=frame),
        diagnosis=classify(text),
        run=RunInfo(mode="isolated", sources={"1": f"print('{SECRETS['email']}')\n"
                                                    f"x = '{HOME}/data'"}),
        env=EnvInfo(torch="2.13.0", python="3.11.7", cudnn="9.1.0.70", backend="cuda"),
    )


@pytest.mark.parametrize("render", ["report", "notebook"])
def test_reports_and_notebooks_carry_no_secrets(tmp_path, render):
    incident = _incident(f"CUDA error: device-side assert triggered\n{SAMPLE}")
    if render == "report":
        text = render_report(incident)
        assert "cuDNN 9.1.0.70" in text  # versions survive
    else:
        path = tmp_path / "r.ipynb"
        export_notebook(incident, path, {1: incident.run.sources["1"]},
                        signature=Signature.of(incident), verify=False)
        text = path.read_text()
        nbformat.validate(nbformat.read(path, as_version=4))
    for name, secret in SECRETS.items():
        assert secret not in text, name
    assert HOME not in text


def test_a_password_in_a_string_keeps_its_closing_quote():
    scrubbed = Redactor(env={}).code('PW = "password=hunter2hunter2"\n')
    assert scrubbed == 'PW = "password=[REDACTED]"\n'


SECRET_ENV = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY",
    "HF_TOKEN": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "MY_SERVICE_PASSWORD": "correct horse battery",
    "DB_PASSWD": "plain-words-here",
    "GITLAB_PAT": "tokenlike_but_no_known_shape",
    "X_AUTH_HEADER": "Digest opaque-value",
    "OPENAI_ORG": "org-abcdef123456",
    "CLOUD_CREDENTIALS": "c2VjcmV0OnZhbHVl",
}


@pytest.mark.parametrize("name", sorted(SECRET_ENV))
def test_values_of_secret_looking_variables_are_masked_whatever_their_shape(name):
    value = SECRET_ENV[name]
    scrub = Redactor(env=SECRET_ENV, project=None)
    text = f"failed with {value} at step 3; retry ({value})"
    assert scrub(text) == f"failed with [REDACTED:{name}] at step 3; retry ([REDACTED:{name}])"
    code = scrub.code(f"value = {value!r}\nprint(value)  # {value}\n")
    assert value not in code
    ast.parse(code)


def test_short_plain_and_path_values_are_not_worth_masking(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "MY_TOKEN": "true", "API_KEY": "abc",
           "HF_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "EDITOR": "vim-in-a-tmux"}
    assert secret_env_values(env) == []
    text = "step 1 true abc vim-in-a-tmux"
    assert Redactor(env=env, project=None)(text) == text


# Each sample parses; its secrets must vanish and the scrubbed sample must still parse.
ADVERSARIAL = [
    ('PW = "password=hunter2hunter2"', ["hunter2hunter2"]),
    ("PW = 'password=hunter2hunter2'", ["hunter2hunter2"]),
    ('PW = """password=hunter2hunter2"""', ["hunter2hunter2"]),
    ("PW = '''password: hunter2hunter2'''", ["hunter2hunter2"]),
    ('PW = r"password=hunter2hunter2\\d"', ["hunter2hunter2"]),
    ('PW = b"password=hunter2hunter2"', ["hunter2hunter2"]),
    ('PW = rb"password=hunter2hunter2"', ["hunter2hunter2"]),
    ('PW = f"password={user}hunter2hunter2"', []),
    ("PW = f\"{'hf_AbCdEfGhIjKlMnOpQrStUvWx'}\"", ["hf_AbCdEfGhIjKlMnOpQrStUvWx"]),
    ('PW = "pass\\"word=hunter2hunter2"', []),
    ('creds = {"password": "hunter22", "api_key": "k3y-v4lu3-x"}', ["hunter22", "k3y-v4lu3-x"]),
    ("creds = dict(password='hunter22', user='jane')", ["hunter22"]),
    ('os.environ["HF_TOKEN"] = "hf_AbCdEfGhIjKlMnOpQrStUvWx"', ["hf_AbCdEfGhIjKlMnOpQrStUvWx"]),
    ('url = "postgres://jane:s3cr3tpass@db.example.com:5432/x"', ["s3cr3tpass"]),
    ('h = {"Authorization": "Bearer abcdefghij.klmnopqrstu"}', ["abcdefghij.klmnopqrstu"]),
    ('h = {"Authorization": "token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"}',
     ["ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"]),
    ("jwt = 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
     "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U'", ["dozjgNryP4J3jVmNHl0w5N"]),
    ('KEY = """-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAxyzxyzxyzxyz0123456789\n'
     'abcdefghijklmnopqrstuvwxyz0123+/==\n-----END RSA PRIVATE KEY-----"""',
     ["MIIEowIBAAKCAQEAxyz", "abcdefghijklmnopqrstuvwxyz0123"]),
    ('KEY = "-----BEGIN PRIVATE KEY-----\\nMIIEowIBAAKCAQEAxyzxyzxyz0123\\n'
     '-----END PRIVATE KEY-----"', ["MIIEowIBAAKCAQEAxyz"]),
    ('aws_id = "AKIAIOSFODNN7EXAMPLE"', ["AKIAIOSFODNN7EXAMPLE"]),
    ('aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
     ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]),
    ("gh = 'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz'",
     ["github_pat_11ABCDEFG0123456789"]),
    ("gh = ('ghp_' 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')", []),
    ('slack = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"',
     ["xoxb-123456789012"]),
    ('blob = "q8Zk3nP0vR2xT7mW9yB4cL6dF1gH5jKa"', ["q8Zk3nP0vR2xT7mW9yB4cL6dF1gH5jKa"]),
    ('hexkey = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"',
     ["9f86d081884c7d659a2feaa0c55ad015"]),
    ("x = 1  # password: hunter2hunter2, mail jane.doe@example.com", ["hunter2hunter2",
                                                                     "jane.doe@example.com"]),
    ('token = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"; t = 2',
     ["sk-proj-abcdefghijklmnopqrstuvwxyz012345"]),
    ('if token == "abcdefgh12345":\n    pass', ["abcdefgh12345"]),
    ('path = "' + HOME + '/data/x.pt"\nopen(path)', [HOME + "/"]),
    ('msg = f"""\n{x!r:>10} at {HOME!s} ' + HOME + '/y\n"""', [HOME + "/y"]),
    ("def f(password='hunter22', *, key=b'\\x00secretvalue'):\n    return password",
     ["hunter22"]),
    ("s = 'it''s' \"ok\" '''x''' + \"\"\"password=hunter2hunter2\"\"\"", ["hunter2hunter2"]),
    ('print("a\\\\", "password=hunter2hunter2")', ["hunter2hunter2"]),
    ("x = [\n    'password=hunter2hunter2',  # the key: AKIAIOSFODNN7EXAMPLE\n]",
     ["hunter2hunter2", "AKIAIOSFODNN7EXAMPLE"]),
    ('await session.login(password="hunter22")', ["hunter22"]),
]


@pytest.mark.parametrize(("sample", "secrets"), ADVERSARIAL,
                         ids=[f"sample{n}" for n in range(len(ADVERSARIAL))])
def test_scrubbed_code_still_parses_and_holds_no_secret(sample, secrets):
    from cudadiag.privacy.redact import _parses

    assert _parses(sample), "a sample must parse before scrubbing"
    scrubbed = Redactor(env=SECRET_ENV).code(sample)
    assert _parses(scrubbed), scrubbed
    for secret in secrets:
        assert secret not in scrubbed, scrubbed


def test_a_literal_that_scrubbing_would_break_becomes_a_same_quoted_placeholder():
    scrub = Redactor(env={"DB_PASSWORD": '"hunter22"'})  # quotes and all, as .env files do
    assert scrub.code("pw = b'x' + \"hunter22\"\n") == "pw = b'x' + \"[REDACTED]\"\n"


def test_only_literals_and_comments_change_in_code():
    scrub = Redactor(user="jane", host="box", env={}, project=None)
    source = "jane = box + 1  # jane on box\nprint('jane@box')\n"
    assert scrub.code(source) == "jane = box + 1  # [USER] on [HOST]\nprint('[USER]@[HOST]')\n"


def test_cells_that_are_not_python_are_scrubbed_as_text():
    scrub = Redactor(env={})
    assert scrub.code(f"!ls {HOME}/data\n%env HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx") == (
        "!ls ~/data\n%env HF_TOKEN=[REDACTED]")


def test_exported_notebook_metadata_and_cells_are_scrubbed(tmp_path, monkeypatch):
    from cudadiag.repro import notebook

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ENV["AWS_SECRET_ACCESS_KEY"])
    observed = Observed(ename="RuntimeError", family="device_assert",
                        evalue=f"{USER}@{HOST} {HOME}/x.pt {SECRETS['hf']} "
                               f"{SECRET_ENV['AWS_SECRET_ACCESS_KEY']}")
    monkeypatch.setattr(notebook, "verify_notebook", lambda *args: (True, observed))
    incident = _incident("CUDA error: device-side assert triggered")
    cells = {1: f"pw = 'password={SECRETS['password']}'",
             2: f"aws = {SECRET_ENV['AWS_SECRET_ACCESS_KEY']!r}\nx = '{HOME}/data'"}
    path = tmp_path / "r.ipynb"
    export_notebook(incident, path, cells, signature=Signature.of(incident), verify=True)
    nb = nbformat.read(path, as_version=4)
    text = path.read_text()
    for secret in (HOME, SECRETS["hf"], SECRET_ENV["AWS_SECRET_ACCESS_KEY"], "hunter2hunter2"):
        assert secret not in text, secret
    evalue = nb.metadata["cudadiag"]["observed"]["evalue"]
    assert "[REDACTED:AWS_SECRET_ACCESS_KEY]" in evalue and "~/x.pt" in evalue
    for cell in nb.cells:
        if cell.cell_type == "code":
            ast.parse(cell.source)


@pytest.mark.parametrize("text", [
    "train.py --api-key s3cr3tAPIkeyValue987 --lr 0.1",
    "train.py --hf-token=s3cr3tAPIkeyValue987",
    "sys.argv = ['train.py', '--db_password', 's3cr3tAPIkeyValue987']",
    "python train.py -secret s3cr3tAPIkeyValue987",
])
def test_a_command_lines_secret_options_are_masked(text):
    scrubbed = Redactor()(text)
    assert "s3cr3tAPIkeyValue987" not in scrubbed and "[REDACTED]" in scrubbed


def test_options_that_only_contain_a_secret_word_are_kept():
    text = "train.py --author Bobbyyyy --monkey 12345678 --keyframes 1000000 --lr 0.001"
    assert Redactor()(text) == text


def test_json_keeps_every_field_with_secret_values_masked_wherever_they_appear():
    record = {"run": {"command": ["train.py", "--api-key", "s3cr3tAPIkeyValue987"]},
              "locals": {"key_copy": "'s3cr3tAPIkeyValue987'", "hf": "'hf_abcdefghijklmnop'",
                         "path": "/home/someone/data"},
              "torch": "2.13.0", "steps": [1, 2]}
    masked = Redactor(env={}).secrets_masked_in(record)
    assert masked["run"]["command"][2] == "[REDACTED]"
    assert masked["locals"] == {"key_copy": "'[REDACTED]'", "hf": "'[REDACTED]'",
                                "path": "/home/someone/data"}
    assert masked["torch"] == "2.13.0" and masked["steps"] == [1, 2]


LECTURE = '''\
"""A tiny character-level GPT, written to be read from top to bottom.

We follow the lecture: first a bigram model, then self-attention, then the full
transformer block. Every token looks at the tokens before it and never at the ones
after it; the mask below enforces that. The secret to training this quickly is a
small learning rate warm-up and gradient clipping, nothing more.
"""
import torch
import torch.nn as nn
from torch.nn import functional as F

# hyperparameters: small enough to train on a laptop CPU in a few minutes
batch_size = 32  # how many independent sequences we process in parallel
block_size = 64  # the maximum context length for predictions
learning_rate = 3e-4
device = 'cuda' if torch.cuda.is_available() else 'cpu'
# the tokenizer maps each character to an integer; the vocabulary is sorted so the
# mapping is stable between runs (the key is the character, the value its index)
# token embeddings are learned; position embeddings tell the model where a token sits
# each token directly reads off the logits for the next token from a lookup table
# the password-protected dataset from the course page is not needed: Shakespeare is
# we pass the token embeddings through the blocks, then through a final layer norm
# Basic training loop below; the authorization step of the old course is gone

with open('input.txt', 'r', encoding='utf-8') as f:
    text = f.read()

chars = sorted(list(set(text)))
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}
encode = lambda s: [stoi[c] for c in s]  # encoder: take a string, output a list of integers
decode = lambda l: ''.join([itos[i] for i in l])  # decoder: integers back to a string


class Head(nn.Module):
    """One head of self-attention.

    The query says what a token is looking for, the key says what it contains, and the
    value is what it hands over when the query and key agree. Token keys and queries
    are dot-producted, scaled by the square root of the head size, and softmaxed.
    """

    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(64, head_size, bias=False)
        self.query = nn.Linear(64, head_size, bias=False)
        # tril is not a parameter of the module: in PyTorch naming conventions it is a
        # buffer, so we register it; the token at position t only sees positions <= t
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)    # (B,T,hs)
        q = self.query(x)  # (B,T,hs)
        # compute attention scores ("affinities"); token credentials are not checked here
        wei = q @ k.transpose(-2, -1) * k.shape[-1]**-0.5  # (B, T, T)
        return F.softmax(wei.masked_fill(self.tril[:T, :T] == 0, float('-inf')), dim=-1)


def get_batch(data):
    """A small batch of inputs x and targets y: the targets are the inputs shifted by
    one token, so the model learns to predict the next token everywhere."""
    ix = torch.randint(len(data) - block_size, (batch_size,))
    return torch.stack([data[i:i + block_size] for i in ix])

# the API key of the tracker is read from the environment, never written here
# tokens = tokenizer.encode(text) in the Hugging Face version of this lecture
# Bearer of bad news: the loss starts at about -ln(1/65) = 4.17 and falls slowly
# a key insight: the logits for token t come from tokens 0..t only
# passwords, secrets and tokens: none of those live in this file
print("token embedding table shape:", (len(chars), 64))
print(f"each token directly reads off the logits, vocabulary {len(chars)}")
'''


def test_a_page_of_ordinary_comments_and_docstrings_is_left_as_it_is(tmp_path):
    scrub = Redactor(project=str(tmp_path), env={})
    assert scrub.code(LECTURE) == LECTURE
    assert scrub(LECTURE) == LECTURE  # the same page as text (a report, a traceback)


def test_secrets_added_to_the_page_are_masked_and_nothing_else_changes(tmp_path):
    secrets = {
        "aws_access_key_id = 'AKIAIOSFODNN7EXAMPLE'": "AKIAIOSFODNN7EXAMPLE",
        "HF_TOKEN = 'hf_QwErTyUiOpAsDfGhJkLzXcVbNm'": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm",
        "db_password = 'correct-horse-battery'": "correct-horse-battery",
        "token = \"abcdefghijkl\"  # quoted: a value, not prose": "abcdefghijkl",
        "headers = {'Authorization': 'Bearer eyJhbGciOi.eyJzdWIi.c2lnbmF0'}": "eyJhbGciOi",
    }
    page = LECTURE.replace("learning_rate = 3e-4\n", "learning_rate = 3e-4\n"
                           + "".join(f"{line}\n" for line in secrets))
    scrubbed = Redactor(project=str(tmp_path), env={}).code(page)
    for line, secret in secrets.items():
        assert secret not in scrubbed, line
    changed = [before for before, after in zip(page.splitlines(), scrubbed.splitlines(),
                                               strict=True) if before != after]
    assert changed == list(secrets)
