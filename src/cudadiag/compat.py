"""`cudadiag env --check`: does what is installed match what will run (method point 12)?

The checks read `Facts`, a plain record of the build, the devices, the driver and the
installed packages: `gather_facts()` reads them from this process (NVML for the driver and
the devices, so CUDA is never initialised here), tests and `--capability` give their own.
Each check says pass, warn (runs, with a limit), fail or skip (cannot be told here), why,
and what to install. The rules are the tables of compat_table.py.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import platform
import re
import sys
from dataclasses import dataclass, field, replace

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from cudadiag import compat_table as table
from cudadiag.env import collect_env, loaded_extensions
from cudadiag.i18n import _, msg
from cudadiag.incident import CompatCheck, EnvInfo, Incident

_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
_CAPABILITY = re.compile(r"^(?:sm_)?(\d+)\.?(\d)$")
_NVML_OK = 0


@dataclass(frozen=True)
class Device:
    """A GPU the program will run on: its name and its capability (`8.6`, or `gfx90a`)."""

    name: str
    capability: str


@dataclass(frozen=True)
class Package:
    """An installed distribution that matters here: its version and its requirements."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    compiled: bool = False
    """It ships compiled modules (.so / .pyd)."""
    loaded: bool = False


@dataclass(frozen=True)
class Facts:
    """What is installed and what will run: the inputs of every check."""

    torch: str
    cuda: str | None = None
    """The CUDA runtime the build was made for (`torch.version.cuda`)."""
    hip: str | None = None
    arch_list: tuple[str, ...] = ()
    devices: tuple[Device, ...] = ()
    devices_note: str = ""
    """Why no device is listed, when none is."""
    driver: str | None = None
    """The NVIDIA driver's version, e.g. `550.54.15`."""
    driver_note: str = ""
    system: str = field(default_factory=platform.system)
    packages: tuple[Package, ...] = ()
    """torch itself, its companions, and the compiled packages that require torch."""

    def package(self, name: str) -> Package | None:
        """Return the installed package `name`, or None."""
        wanted = canonicalize_name(name)
        return next((p for p in self.packages if canonicalize_name(p.name) == wanted), None)


def gather_facts(env: EnvInfo | None = None) -> Facts:
    """Return the facts of this process: the build fields of `env` (collected now when
    None), the driver and every GPU from NVML (else the device of `env`, when its process
    had initialised CUDA), the installed packages from their
    metadata. Never initialises CUDA and never raises; what cannot be read is left empty
    with a note."""
    env = env or collect_env()
    driver, nvml_devices, nvml_note = nvml_facts()
    devices = nvml_devices or _devices_of(env)
    note = "" if devices else (nvml_note or "no GPU found")
    return Facts(torch=env.torch, cuda=env.cuda, hip=env.hip, arch_list=tuple(env.arch_list),
                 devices=tuple(devices), devices_note=note, driver=driver,
                 driver_note=nvml_note if driver is None else "",
                 packages=tuple(installed_packages()))


def run_checks(facts: Facts, capability: str | None = None) -> list[CompatCheck]:
    """Return every check on `facts`; `capability` (`8.6`, `sm_86` or `gfx90a`) replaces
    the devices found. Raises ValueError for a capability written another way."""
    if capability is not None:
        facts = replace(facts, devices=(Device(msg("the capability asked"), _normal(capability)),))
    return [*capability_checks(facts, asked=capability is not None), driver_check(facts),
            *companion_checks(facts), *extension_checks(facts)]


def failed(checks: list[CompatCheck]) -> bool:
    """Return True when a check failed."""
    return any(c.status == "fail" for c in checks)


def attach_checks(incident: Incident) -> None:
    """Run the checks for `incident` (an `op_unavailable` error: a build that does not
    match the device, the driver or another build) and keep them in its env (advice.py puts
    each failure, with what to install, in front of its first checks)."""
    if incident.env is None:
        return
    incident.env.compat = run_checks(gather_facts(incident.env))


def capability_checks(facts: Facts, *, asked: bool = False) -> list[CompatCheck]:
    """Return, per device, whether the build carries code for its capability (SASS of the
    same major, or PTX the driver can compile; ROCm: the very gfx target)."""
    if not facts.cuda and not facts.hip:
        return [_no_gpu_build(facts, asked)]
    if not facts.devices:
        return [CompatCheck(msg("capability"), "skip",
                            msg("{note}; give --capability X.Y to check the GPU the program "
                                "will run on", note=facts.devices_note or msg("no GPU found")))]
    if not facts.arch_list:
        return [CompatCheck(msg("capability"), "skip",
                            msg("the build's arch list cannot be read (torch._C has no arch "
                                "flags)"))]
    return [_rocm_target(facts, d) if facts.hip else _cuda_capability(facts, d)
            for d in facts.devices]


def driver_check(facts: Facts) -> CompatCheck:
    """Return whether the NVIDIA driver runs the CUDA the build was made for: the toolkit's
    own minimum, else the major release's minimum under minor version compatibility."""
    if not facts.cuda:
        return CompatCheck(msg("driver"), "skip",
                           msg("a ROCm build: no NVIDIA driver needed") if facts.hip
                           else msg("a build without CUDA: no NVIDIA driver needed"))
    if facts.driver is None:
        return CompatCheck(msg("driver"), "skip",
                           facts.driver_note or msg("no NVIDIA driver found"))
    build = _major_minor(facts.cuda)
    toolkit = _toolkit_minimum(build)
    minimum = table.MINOR_VERSION_MINIMUM.get(build[0])
    driver = _numbers(facts.driver)
    name = msg("driver {version}", version=str(facts.driver))
    if toolkit is not None and driver >= _numbers(_for_system(toolkit, facts.system)):
        return CompatCheck(name, "pass", msg("runs CUDA {cuda} (needs >= {driver})",
                                             cuda=facts.cuda,
                                             driver=_for_system(toolkit, facts.system)),
                           source=toolkit.source)
    if minimum is not None and driver >= _numbers(_for_system(minimum, facts.system)):
        return CompatCheck(
            name, "warn",
            msg("older than CUDA {cuda}'s own driver, but runs CUDA {major}.x through minor "
                "version compatibility (>= {driver}): PTX compiled by CUDA {cuda} cannot be "
                "JIT-compiled by this driver", cuda=facts.cuda, major=build[0],
                driver=_for_system(minimum, facts.system)),
            fix=_driver_fix(toolkit, facts.system), source=minimum.source)
    known = minimum or toolkit
    needed = _for_system(known, facts.system) if known else "?"
    return CompatCheck(
        name, "fail",
        msg("too old for this PyTorch build (CUDA {cuda} needs a driver >= {driver}): "
            "torch.cuda.is_available() is False, with 'The NVIDIA driver on your system is too "
            "old'", cuda=facts.cuda, driver=needed),
        fix=_older_build_fix(driver, facts.system) or _driver_fix(toolkit, facts.system),
        source=known.source if known else table.NVIDIA_MVC)


def companion_checks(facts: Facts) -> list[CompatCheck]:
    """Return whether torchvision, torchaudio and triton, where installed, were built for
    this PyTorch: their own pin on torch first, else the release table."""
    checks = []
    for name in ("torchvision", "torchaudio"):
        package = facts.package(name)
        if package is not None:
            checks.append(_companion_check(facts, package))
    triton = facts.package("pytorch-triton-rocm" if facts.hip else "triton")
    if triton is not None:
        checks.append(_triton_check(facts, triton))
    return checks


def extension_checks(facts: Facts) -> list[CompatCheck]:
    """Return, per compiled package that requires torch, whether the PyTorch it was built
    for (its pin on torch, or its version's +pt / torch / cu tag) is the running one."""
    return [_extension_check(facts, p) for p in facts.packages
            if p.compiled and canonicalize_name(p.name) not in table.COMPANION_PACKAGES
            and canonicalize_name(p.name) != "torch"]


def nvml_facts() -> tuple[str | None, list[Device], str]:
    """Return (driver version, GPUs with their capability, note) from NVIDIA's management
    library, which reads them without creating a CUDA context; (None, [], why) without it."""
    library = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None, [], msg("no NVIDIA driver found ({library} cannot be loaded)",
                             library=library)
    if nvml.nvmlInit_v2() != _NVML_OK:
        return None, [], msg("the NVIDIA driver does not answer (nvmlInit failed)")
    try:
        text = ctypes.create_string_buffer(96)
        driver = (text.value.decode() if nvml.nvmlSystemGetDriverVersion(text, 96) == _NVML_OK
                  else None)
        return driver, _nvml_devices(nvml), ""
    finally:
        nvml.nvmlShutdown()


def installed_packages() -> list[Package]:
    """Return torch, its companions, and every distribution that requires torch, with
    their requirements and whether they ship compiled modules."""
    loaded = {canonicalize_name(n) for n in loaded_extensions()}
    found: dict[str, Package] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        key = canonicalize_name(name)
        requires = tuple(dist.requires or ())
        if key in found or not (key == "torch" or key in table.COMPANION_PACKAGES
                                or _torch_requirement(requires) is not None):
            continue
        compiled = any(str(f).endswith((".so", ".pyd")) for f in dist.files or ())
        found[key] = Package(name, dist.version, requires, compiled, key in loaded)
    return list(found.values())


def _nvml_devices(nvml: ctypes.CDLL) -> list[Device]:
    count = ctypes.c_uint()
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_OK:
        return []
    devices = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        name = ctypes.create_string_buffer(96)
        major, minor = ctypes.c_int(), ctypes.c_int()
        if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == _NVML_OK
                and nvml.nvmlDeviceGetName(handle, name, 96) == _NVML_OK
                and nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)) == _NVML_OK):
            devices.append(Device(name.value.decode(), f"{major.value}.{minor.value}"))
    return devices


def _devices_of(env: EnvInfo) -> list[Device]:
    """The device of `env`, when its process had initialised CUDA (`sm_86` or `gfx90a`)."""
    capability = env.capability or ""
    match = re.fullmatch(r"sm_(\d+)(\d)", capability)
    if match:
        return [Device(env.device_name or "GPU", f"{match[1]}.{match[2]}")]
    if capability.startswith("gfx"):
        return [Device(env.device_name or "GPU", capability)]
    return []


def _normal(capability: str) -> str:
    text = capability.strip().lower()
    if re.fullmatch(r"gfx[0-9a-f]+", text):
        return text
    match = _CAPABILITY.fullmatch(text)
    if not match:
        raise ValueError(_("--capability takes X.Y (e.g. 8.6), sm_XY (sm_86) or a gfx "
                           "target (gfx90a), not {value}").format(value=repr(capability)))
    return f"{int(match[1])}.{match[2]}"


def _no_gpu_build(facts: Facts, asked: bool) -> CompatCheck:
    if not asked and not facts.devices:
        return CompatCheck(msg("capability"), "skip",
                           msg("torch {torch} is a build without CUDA and no GPU was found",
                               torch=facts.torch))
    device = facts.devices[0]
    reason = (msg("this PyTorch build (torch {torch}) has no CUDA support: it cannot run on a "
                  "GPU of capability {capability}", torch=facts.torch,
                  capability=device.capability) if asked
              else msg("this PyTorch build (torch {torch}) has no CUDA support: it cannot run "
                       "on the GPUs found ({devices})", torch=facts.torch,
                       devices=", ".join(d.name for d in facts.devices)))
    return CompatCheck(msg("capability {capability}", capability=device.capability), "fail",
                       reason,
                       fix=_build_for(device.capability), source=table.INSTALL_PAGE)


def _cuda_capability(facts: Facts, device: Device) -> CompatCheck:
    name = msg("capability {capability} ({device})", capability=device.capability,
               device=device.name)
    if device.capability.startswith("gfx"):
        return CompatCheck(name, "fail", msg("{target} is an AMD target; this is a CUDA build "
                                             "(CUDA {cuda})", target=device.capability,
                                             cuda=str(facts.cuda)),
                           fix=_build_for(device.capability))
    wanted = _major_minor(device.capability)
    how, arch = _code_for(facts.arch_list, wanted)
    listed = " ".join(facts.arch_list)
    if how == "sass":
        return CompatCheck(name, "pass", msg("the build carries {arch} code for it ({archs})",
                                             arch=arch, archs=listed),
                           source=table.PTX_JIT_RULE)
    if how == "ptx":
        return CompatCheck(
            name, "warn",
            msg("no machine code for it, only {arch} PTX, which the driver compiles at the "
                "first launch (slow) and only when it supports CUDA {cuda} or newer", arch=arch,
                cuda=str(facts.cuda)),
            fix=_build_for(device.capability), source=table.PTX_JIT_RULE)
    return CompatCheck(
        name, "fail", msg("the build carries no code that runs on it ({archs}): 'no kernel "
                          "image is available for execution on the device'", archs=listed),
        fix=_build_for(device.capability), source=table.PTX_JIT_RULE)


def _rocm_target(facts: Facts, device: Device) -> CompatCheck:
    name = msg("gfx target {target} ({device})", target=device.capability, device=device.name)
    target = device.capability.split(":")[0]
    if not target.startswith("gfx"):
        return CompatCheck(name, "fail", msg("{target} is an NVIDIA capability; this is a ROCm "
                                             "build (HIP {hip})", target=target,
                                             hip=str(facts.hip)),
                           fix=_build_for(target), source=table.ROCM_RULE)
    if target in {a.split(":")[0] for a in facts.arch_list}:
        return CompatCheck(name, "pass", msg("{target} is in the build's arch list",
                                             target=target),
                           source=table.ROCM_RULE)
    return CompatCheck(
        name, "fail", msg("{target} is not in the build's arch list ({archs}); ROCm has no "
                          "forward compatibility", target=target,
                          archs=" ".join(facts.arch_list)),
        fix=msg("install a ROCm build of PyTorch that lists {target}, or build PyTorch with "
                "PYTORCH_ROCM_ARCH={target}", target=target), source=table.ROCM_RULE)


def _code_for(arch_list: tuple[str, ...], wanted: tuple[int, int]) -> tuple[str | None, str]:
    """("sass" | "ptx" | None, the arch entry) for a device of capability `wanted`: the
    machine code of the highest capability that runs on it, else the highest PTX."""
    runnable: dict[str, list[tuple[tuple[int, int], str]]] = {"sm": [], "compute": []}
    for entry in arch_list:
        match = _ARCH.match(entry)
        if not match:
            continue
        kind, digits, suffix = match.groups()
        built = (int(digits[:-1]), int(digits[-1]))
        if suffix == "a":
            runs = built == wanted
        elif kind == "sm" or suffix == "f":
            runs = built[0] == wanted[0] and built[1] <= wanted[1]
        else:
            runs = built <= wanted
        if runs:
            runnable[kind].append((built, entry))
    for kind, how in (("sm", "sass"), ("compute", "ptx")):
        if runnable[kind]:
            return how, max(runnable[kind])[1]
    return None, ""


def _build_for(capability: str) -> str:
    """What to install for a GPU of `capability`: the first wheel index whose builds carry
    machine code for it."""
    if capability.startswith("gfx"):
        return msg("install a ROCm build of PyTorch that lists it: {page}",
                   page=table.INSTALL_PAGE)
    wanted = _major_minor(capability)
    for wheel in table.WHEEL_VARIANTS:
        archs = tuple(f"sm_{a.replace('.', '').removesuffix('+PTX')}"
                      for a in wheel.archs.split(";"))
        if _code_for(archs, wanted)[0] == "sass":
            return msg("pip install '{wheel}' --index-url {index} (built for {archs})",
                       wheel=wheel.torch, index=table.WHEEL_INDEX.format(variant=wheel.variant),
                       archs=wheel.archs)
    return msg("no PyTorch wheel in the table carries code for capability {capability}: build "
               "PyTorch from source with TORCH_CUDA_ARCH_LIST={capability}",
               capability=capability)


def _toolkit_minimum(build: tuple[int, int]) -> table.DriverMinimum | None:
    return next((row for row in table.CUDA_MIN_DRIVER
                 if _major_minor(row.cuda) == build), None)


def _for_system(row: table.DriverMinimum, system: str) -> str:
    return (row.windows or row.linux) if system == "Windows" else row.linux


def _driver_fix(toolkit: table.DriverMinimum | None, system: str) -> str:
    if toolkit is None:
        return msg("update the NVIDIA driver")
    return msg("update the NVIDIA driver to >= {driver} (CUDA {cuda}'s own), from {page}",
               driver=_for_system(toolkit, system), cuda=toolkit.cuda,
               page="https://www.nvidia.com/Download/index.aspx")


def _older_build_fix(driver: tuple[int, ...], system: str) -> str:
    """A build for a CUDA this driver runs (the newest PyTorch first), if the wheel table
    has one."""
    for wheel in table.WHEEL_VARIANTS:
        minimum = table.MINOR_VERSION_MINIMUM.get(_major_minor(wheel.cuda)[0])
        if minimum is not None and driver >= _numbers(_for_system(minimum, system)):
            return msg("update the driver, or install a build this driver runs: pip install "
                       "'{wheel}' --index-url {index}", wheel=wheel.torch,
                       index=table.WHEEL_INDEX.format(variant=wheel.variant))
    return ""


def _companion_check(facts: Facts, package: Package) -> CompatCheck:
    name = f"{package.name} {package.version}"
    pin = _torch_requirement(package.requires)
    torch_version = _version(facts.torch)
    expected = _companion_row(facts.torch)
    wanted = getattr(expected, package.name, None) if expected else None
    fix = (msg("pip install '{package}=={version}.*' from the index torch came from",
               package=package.name, version=wanted)
           if wanted and not wanted.endswith("+") else
           msg("install the {package} release made for torch {torch}", package=package.name,
               torch=facts.torch))
    cuda_clash = _cuda_tag_clash(package.version, facts.torch)
    if cuda_clash:
        return CompatCheck(name, "fail", cuda_clash, fix=fix, source=table.COMPANION_RULE)
    if pin is not None and pin.specifier and torch_version is not None:
        if pin.specifier.contains(torch_version, prereleases=True):
            return CompatCheck(name, "pass", msg("built for torch {torch}",
                                                 torch=str(pin.specifier)),
                               source="its own metadata (Requires-Dist)")
        return CompatCheck(name, "fail", msg("built for torch {pinned}, this is torch {torch}",
                                             pinned=str(pin.specifier), torch=facts.torch),
                           fix=fix,
                           source="its own metadata (Requires-Dist)")
    if wanted is None or expected is None:
        return CompatCheck(name, "skip", msg("the table has no {package} release for torch "
                                             "{torch} and the package pins no torch",
                                             package=package.name, torch=facts.torch))
    if _fits_release(package.version, wanted, facts.torch):
        return CompatCheck(name, "pass", msg("the release made for torch {torch}",
                                             torch=expected.torch),
                           source=expected.source)
    return CompatCheck(name, "fail", msg("torch {torch} goes with {package} {version}",
                                         torch=expected.torch, package=package.name,
                                         version=str(wanted)),
                       fix=fix, source=expected.source)


def _triton_check(facts: Facts, triton: Package) -> CompatCheck:
    name = f"{triton.name} {triton.version}"
    torch_package = facts.package("torch")
    pin = next((r for r in map(_requirement, torch_package.requires if torch_package else ())
                if r is not None and canonicalize_name(r.name) == canonicalize_name(
                    triton.name)), None)
    installed = _version(triton.version)
    if pin is not None and pin.specifier and installed is not None:
        ok = pin.specifier.contains(installed, prereleases=True)
        return CompatCheck(name, "pass" if ok else "fail",
                           msg("torch {torch} requires {requirement}", torch=facts.torch,
                               requirement=triton.name + str(pin.specifier)),
                           fix="" if ok else f"pip install '{triton.name}{pin.specifier}'",
                           source="torch's own metadata (Requires-Dist)")
    row = _companion_row(facts.torch)
    if row is None or row.triton is None or installed is None:
        return CompatCheck(name, "skip", msg("torch {torch} pins no triton here and the table "
                                             "has no triton release for it", torch=facts.torch))
    ok = installed.release[:2] == Version(row.triton).release[:2]
    return CompatCheck(name, "pass" if ok else "fail",
                       msg("torch {torch} was released with triton {triton}", torch=row.torch,
                           triton=row.triton),
                       fix="" if ok else f"pip install 'triton=={row.triton}'",
                       source=row.source)


def _extension_check(facts: Facts, package: Package) -> CompatCheck:
    name = f"{package.name} {package.version}" + (" (loaded)" if package.loaded else "")
    pin = _torch_requirement(package.requires)
    torch_version = _version(facts.torch)
    fix = msg("install the {package} build made for torch {torch}, or rebuild it against this "
              "torch (pip install --no-build-isolation --force-reinstall {package})",
              package=package.name, torch=facts.torch)
    cuda_clash = _cuda_tag_clash(package.version, facts.torch)
    if cuda_clash:
        return CompatCheck(name, "fail", cuda_clash, fix=fix, source=table.EXTENSION_RULE)
    built_for = _torch_in_tag(package.version)
    if built_for is not None and torch_version is not None:
        ok = torch_version.release[:2] == built_for
        return CompatCheck(name, "pass" if ok else "fail",
                           msg("built for torch {torch} (its version tag)",
                               torch=".".join(map(str, built_for))),
                           fix="" if ok else fix, source=table.EXTENSION_RULE)
    if pin is not None and _pins_a_release(pin.specifier) and torch_version is not None:
        ok = pin.specifier.contains(torch_version, prereleases=True)
        return CompatCheck(name, "pass" if ok else "fail",
                           msg("built for torch {torch} (its metadata)",
                               torch=str(pin.specifier)),
                           fix="" if ok else fix, source=table.EXTENSION_RULE)
    return CompatCheck(name, "skip",
                       msg("it records no PyTorch it was built for: an 'undefined symbol' "
                           "ImportError would mean it needs a rebuild for torch {torch}",
                           torch=facts.torch),
                       source=table.EXTENSION_RULE)


def _companion_row(torch: str) -> table.Companions | None:
    version = _version(torch)
    if version is None:
        return None
    minor = f"{version.release[0]}.{version.release[1]}"
    return next((row for row in table.TORCH_COMPANIONS if row.torch == minor), None)


def _fits_release(installed: str, wanted: str, torch: str) -> bool:
    """True when `installed` is the `wanted` release series (`0.20`), or, for a
    stable-ABI release (`2.11+`), at least that and not newer than torch."""
    version, torch_version = _version(installed), _version(torch)
    if version is None or torch_version is None:
        return False
    if wanted.endswith("+"):
        floor = Version(wanted[:-1]).release[:2]
        return floor <= version.release[:2] <= torch_version.release[:2]
    return version.release[:2] == Version(wanted).release[:2]


def _cuda_tag_clash(version: str, torch: str) -> str | None:
    """Why a build tagged for one CUDA (or the CPU) cannot go with torch's, or None."""
    mine, theirs = _local_cuda(version), _local_cuda(torch)
    if mine is None or theirs is None or mine == theirs:
        return None
    if "cpu" in (mine, theirs):
        return msg("built for {mine}, torch {torch} for {theirs}", mine=mine.upper(),
                   torch=torch, theirs=theirs.upper())
    if mine[:-1] != theirs[:-1]:  # cu124 vs cu130: another major release
        return msg("built for CUDA {mine}, torch {torch} for CUDA {theirs}: 'compiled with "
                   "different CUDA major versions'", mine=_cuda_of_tag(mine), torch=torch,
                   theirs=_cuda_of_tag(theirs))
    return None


def _local_cuda(version: str) -> str | None:
    local = version.partition("+")[2]
    match = re.search(r"(cu\d{3,4}|cpu)(?!\d)", local)
    return match[1] if match else None


def _cuda_of_tag(tag: str) -> str:
    digits = tag[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def _torch_in_tag(version: str) -> tuple[int, int] | None:
    """The torch release a version tag names: `+pt24cu124` (PyG), `+cu122torch2.3...`."""
    local = version.partition("+")[2]
    match = re.search(r"torch(\d+)\.(\d+)", local)
    if match:
        return int(match[1]), int(match[2])
    match = re.search(r"pt(\d)(\d+)", local)
    return (int(match[1]), int(match[2])) if match else None


def _pins_a_release(specifier: SpecifierSet) -> bool:
    """True when the specifier names the release it was built for (==, ~=, an upper bound);
    a bare lower bound says nothing about binary compatibility."""
    return any(s.operator in ("==", "===", "~=", "<", "<=") for s in specifier)


def _torch_requirement(requires: tuple[str, ...]) -> Requirement | None:
    for text in requires:
        requirement = _requirement(text)
        if requirement is not None and canonicalize_name(requirement.name) == "torch" and (
                requirement.marker is None or "extra" not in str(requirement.marker)):
            return requirement
    return None


def _requirement(text: str) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _major_minor(text: str) -> tuple[int, int]:
    parts = [int(p) for p in re.findall(r"\d+", text)[:2]]
    return (parts[0], parts[1] if len(parts) > 1 else 0)


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
