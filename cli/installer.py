"""``lea-agent-setup.exe``: the agent folder as one installer a desktop team can deploy.

Built on Linux with NSIS (Debian's ``nsis``: ``makensis``) by ``python -m cli.bundle --out DIR
--setup FILE``; docs/windows-agent.md says what it does and its parameters. In short, per user
and without administrator rights:

- the program in ``%LOCALAPPDATA%\\Programs\\Lea Agent`` (``/D=`` another), its data in
  ``%LOCALAPPDATA%\\Lea`` (:data:`DATA_LAYOUT`), kept across upgrades and uninstalls unless
  ``/REMOVE_DATA``;
- the keys given (``/SERVER_KEY=``, ``/AGENT_KEY=``, ``/SSH_KEY=``, ``/SSH_KNOWN_HOSTS=``)
  copied to ``keys\\``, whose permissions ``icacls`` restricts to the person, the
  administrators and SYSTEM (Windows' OpenSSH refuses a private key others can read);
- ``agent.args``: the agent's command line, one argument a line (``python -m agent
  @FILE``), from ``/MACHINE_ID=`` (default ``%COMPUTERNAME%``), ``/BROKER=HOST:PORT``
  (required: the CURVE endpoint, or with ``/SSH=`` the broker as the server sees it; no
  ``tcp://``: a ``/`` ends a value on an installer's command line), ``/BACKUP_BROKER=``
  (a broker pair's second), ``/EXECUTOR=`` (``desktop``);
- the log-on task "Lea agent" (:data:`TASK_NAME`) from a task XML: the person's session,
  their rights, ``pythonw.exe`` (no console), no time limit, on battery too, started again
  every 5 minutes if it is not running (a crash) and on a failed start;
- an uninstaller (``uninstall.exe /S [/REMOVE_DATA]``) and an "Apps" entry.

Every command it runs, and its exit code, goes to ``install.log`` in the data folder
(UTF-16): what IT reads when a deployment fails. Exit code 2 when a parameter is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TASK_NAME = "Lea agent"
DATA_LAYOUT = {"agent": "agent", "keys": "keys", "args": "agent.args",
               "config": "lea-agent.toml", "task": "lea-agent-task.xml", "log": "install.log"}
"""Under the data folder: the agent's ``--data-dir`` (ledger, logs, status), the keys, the
command line, the settings, the task as registered, the installer's log."""
RESTART_EVERY = "PT5M"


class InstallerError(RuntimeError):
    """makensis is missing or failed."""


LAUNCHER = r"""@echo off
rem Lea workstation agent, installed by lea-agent-setup.exe (docs/windows-agent.md in the
rem project). Its command line: %LOCALAPPDATA%\Lea\agent.args (one argument a line); the
rem log-on task "Lea agent" starts it windowless.
rem   lea-agent status    is it running, its server link, its monitors, its last action
rem   lea-agent start     start the task now          lea-agent stop   stop it
rem   lea-agent console   run it in this window instead (Ctrl-C stops it), to watch it
setlocal
set "HOME_DATA=%LOCALAPPDATA%\Lea"
if /i "%~1"=="status" goto status
if /i "%~1"=="start" goto start
if /i "%~1"=="stop" goto stop
if /i "%~1"=="console" goto console
echo usage: lea-agent status ^| start ^| stop ^| console
exit /b 2
:status
"%~dp0python\python.exe" -m agent status --data-dir "%HOME_DATA%\agent"
exit /b %errorlevel%
:start
schtasks /Run /TN "Lea agent"
exit /b %errorlevel%
:stop
schtasks /End /TN "Lea agent"
exit /b %errorlevel%
:console
"%~dp0python\python.exe" -m agent "@%HOME_DATA%\agent.args"
exit /b %errorlevel%
"""

CONFIG = """\
# Settings of the Lea agent on this workstation (every setting: docs/operations.md,
# "Settings"); its command line (machine id, broker, keys) is agent.args, beside this file.
[lea]
log_level = "INFO"
"""

NSIS = r"""
; x64 like the agent it installs (the embeddable CPython); Wine64 runs no 32-bit program
Target amd64-unicode
@COMPRESSION@
!include "FileFunc.nsh"
!include "LogicLib.nsh"
Name "Léa agent"
!define UNINST "Software\Microsoft\Windows\CurrentVersion\Uninstall\LeaAgent"
OutFile "@OUT@"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\Lea Agent"
ShowInstDetails show
Page directory
Page instfiles
UninstPage uninstConfirm
UninstPage instfiles

Var Params
Var Data
Var Log
Var MachineId
Var Broker
Var Backup
Var Executor
Var ServerKey
Var AgentKey
Var Ssh
Var SshKey
Var KnownHosts
Var User

!macro Opt NAME VAR DEFAULT
  ClearErrors
  ${GetOptions} $Params "/${NAME}=" ${VAR}
  ${If} ${Errors}
    StrCpy ${VAR} "${DEFAULT}"
  ${EndIf}
!macroend

!macro Say TEXT
  FileWriteUTF16LE $Log "${TEXT}$\r$\n"
  DetailPrint "${TEXT}"
!macroend

!macro Run CMD
  StrCpy $2 '${CMD}'
  !insertmacro Say "run: $2"
  nsExec::ExecToStack $2
  Pop $0
  Pop $1
  !insertmacro Say "exit $0: $1"
!macroend

!macro OpenLog
  CreateDirectory "$Data"
  FileOpen $Log "$Data\@LOG@" a
  FileSeek $Log 0 END $0
  ${If} $0 == 0
    FileWriteWord $Log 0xFEFF
  ${EndIf}
!macroend

!macro Arg TEXT
  FileWriteUTF16LE $0 "${TEXT}$\r$\n"
!macroend

Function .onInit
  ${GetParameters} $Params
  StrCpy $Data "$LOCALAPPDATA\Lea"
  ReadEnvStr $R0 COMPUTERNAME
  !insertmacro Opt MACHINE_ID $MachineId $R0
  !insertmacro Opt BROKER $Broker ""
  !insertmacro Opt BACKUP_BROKER $Backup ""
  !insertmacro Opt EXECUTOR $Executor "desktop"
  !insertmacro Opt SERVER_KEY $ServerKey ""
  !insertmacro Opt AGENT_KEY $AgentKey ""
  !insertmacro Opt SSH $Ssh ""
  !insertmacro Opt SSH_KEY $SshKey ""
  !insertmacro Opt SSH_KNOWN_HOSTS $KnownHosts ""
FunctionEnd

Function Fail
  Exch $R9
  !insertmacro Say "error: $R9"
  FileClose $Log
  IfSilent +2
  MessageBox MB_ICONSTOP "$R9"
  SetErrorLevel 2
  Quit
FunctionEnd

Section "Install"
  !insertmacro OpenLog
  !insertmacro Say "install to $INSTDIR, data in $Data, parameters: $Params"
  ; host:port: a "/" ends an option's value on the command line (FileFunc's GetOptions)
  StrCpy $0 $Broker 4
  ${If} $Broker == ""
  ${OrIf} $0 == "tcp:"
    Push "/BROKER=HOST:PORT is required: the broker's CURVE endpoint, without tcp://"
    Call Fail
  ${EndIf}
  StrCpy $Broker "tcp://$Broker"
  StrCpy $0 $Backup 4
  ${If} $0 == "tcp:"
    Push "/BACKUP_BROKER=HOST:PORT, without tcp://"
    Call Fail
  ${ElseIf} $Backup != ""
    StrCpy $Backup "tcp://$Backup"
  ${EndIf}
  ; through SSH too: the tunnel reaches the CURVE listener, and the agent proves who it is
  ${If} $ServerKey == ""
  ${OrIf} $AgentKey == ""
    Push "/SERVER_KEY= and /AGENT_KEY= are required (CURVE, with or without /SSH=): an \
agent never uses the plain endpoint"
    Call Fail
  ${EndIf}
  !insertmacro Run 'schtasks /End /TN "@TASK@"'
  SetOutPath "$INSTDIR"
  File /r "@SOURCE@\*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  CreateDirectory "$Data\@AGENT@"
  CreateDirectory "$Data\@KEYS@"
  CopyFiles /SILENT "$ServerKey" "$Data\@KEYS@\server.key"
  CopyFiles /SILENT "$AgentKey" "$Data\@KEYS@\$MachineId.key_secret"
  ${If} $SshKey != ""
    CopyFiles /SILENT "$SshKey" "$Data\@KEYS@\lea_agent"
  ${EndIf}
  ${If} $KnownHosts != ""
    CopyFiles /SILENT "$KnownHosts" "$Data\@KEYS@\known_hosts"
  ${EndIf}
  ReadEnvStr $R0 USERDOMAIN
  ReadEnvStr $R1 USERNAME
  StrCpy $User "$R0\$R1"
  ${If} $R0 == ""
    StrCpy $User "$R1"
  ${EndIf}
  !insertmacro Run '"$SYSDIR\icacls.exe" "$Data\@KEYS@" /inheritance:r \
/grant:r "$User:(OI)(CI)F" /grant:r "*S-1-5-32-544:(OI)(CI)F" /grant:r "*S-1-5-18:(OI)(CI)F" /T /Q'

  FileOpen $0 "$Data\@ARGS@" w
  FileWriteWord $0 0xFEFF
  !insertmacro Arg "--machine-id"
  !insertmacro Arg "$MachineId"
  !insertmacro Arg "--connect"
  !insertmacro Arg "$Broker"
  !insertmacro Arg "--executor"
  !insertmacro Arg "$Executor"
  !insertmacro Arg "--data-dir"
  !insertmacro Arg "$Data\@AGENT@"
  !insertmacro Arg "--config"
  !insertmacro Arg "$Data\@CONFIG@"
  ${If} $Ssh != ""
    !insertmacro Arg "--ssh"
    !insertmacro Arg "$Ssh"
    !insertmacro Arg "--ssh-key"
    !insertmacro Arg "$Data\@KEYS@\lea_agent"
    ${If} $KnownHosts != ""
      !insertmacro Arg "--ssh-known-hosts"
      !insertmacro Arg "$Data\@KEYS@\known_hosts"
    ${EndIf}
  ${EndIf}
  !insertmacro Arg "--curve"
  !insertmacro Arg "--server-key"
  !insertmacro Arg "$Data\@KEYS@\server.key"
  !insertmacro Arg "--agent-key"
  !insertmacro Arg "$Data\@KEYS@\$MachineId.key_secret"
  FileClose $0
  !insertmacro Say "wrote $Data\@ARGS@"

  IfFileExists "$Data\@CONFIG@" config_done
  CopyFiles /SILENT "$INSTDIR\lea-agent.toml" "$Data\@CONFIG@"
  config_done:
  ${If} $Backup != ""
    FileOpen $0 "$Data\@CONFIG@" a
    FileSeek $0 0 END
    FileWrite $0 'mdp_backup_endpoint = "$Backup"$\r$\n'
    FileClose $0
  ${EndIf}

  FileOpen $0 "$Data\@TASKXML@" w
  FileWriteWord $0 0xFEFF
@TASK_XML@
  FileClose $0
  !insertmacro Run 'schtasks /Create /TN "@TASK@" /XML "$Data\@TASKXML@" /F'
  !insertmacro Run 'schtasks /Run /TN "@TASK@"'

  WriteRegStr HKCU "${UNINST}" "DisplayName" "Léa agent"
  WriteRegStr HKCU "${UNINST}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINST}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegStr HKCU "${UNINST}" "InstallLocation" "$INSTDIR"
  WriteRegDWORD HKCU "${UNINST}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINST}" "NoRepair" 1
  !insertmacro Say "installed"
  FileClose $Log
SectionEnd

Function un.onInit
  ${GetParameters} $Params
  StrCpy $Data "$LOCALAPPDATA\Lea"
FunctionEnd

Section "Uninstall"
  !insertmacro OpenLog
  !insertmacro Say "uninstall $INSTDIR, parameters: $Params"
  !insertmacro Run 'schtasks /End /TN "@TASK@"'
  !insertmacro Run 'schtasks /Delete /TN "@TASK@" /F'
  DeleteRegKey HKCU "${UNINST}"
  RMDir /r "$INSTDIR"
  ClearErrors
  ${GetOptions} $Params "/REMOVE_DATA" $0
  ${IfNot} ${Errors}
    !insertmacro Say "removing $Data"
    FileClose $Log
    RMDir /r "$Data"
  ${Else}
    IfSilent keep
    MessageBox MB_YESNO|MB_DEFBUTTON2 \
      "Remove the agent's data too (ledger, logs, keys) in $Data?" IDNO keep
    !insertmacro Say "removing $Data"
    FileClose $Log
    RMDir /r "$Data"
    Goto done
    keep:
    !insertmacro Say "uninstalled; data kept in $Data"
    FileClose $Log
    done:
  ${EndIf}
SectionEnd
"""

TASK_XML = f"""<?xml version="1.0" encoding="UTF-16"?>
<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">
  <RegistrationInfo><Description>Léa workstation agent</Description></RegistrationInfo>
  <Triggers>
    <LogonTrigger>
      <Enabled>true</Enabled>
      <UserId>$User</UserId>
      <Repetition><Interval>{RESTART_EVERY}</Interval><StopAtDurationEnd>false</StopAtDurationEnd></Repetition>
    </LogonTrigger>
  </Triggers>
  <Principals>
    <Principal id="Author">
      <UserId>$User</UserId>
      <LogonType>InteractiveToken</LogonType>
      <RunLevel>LeastPrivilege</RunLevel>
    </Principal>
  </Principals>
  <Settings>
    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>
    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>
    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>
    <AllowHardTerminate>true</AllowHardTerminate>
    <StartWhenAvailable>true</StartWhenAvailable>
    <RunOnlyIfNetworkAvailable>false</RunOnlyIfNetworkAvailable>
    <IdleSettings><StopOnIdleEnd>false</StopOnIdleEnd><RestartOnIdle>false</RestartOnIdle></IdleSettings>
    <AllowStartOnDemand>true</AllowStartOnDemand>
    <Enabled>true</Enabled>
    <Hidden>false</Hidden>
    <RunOnlyIfIdle>false</RunOnlyIfIdle>
    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>
    <Priority>5</Priority>
    <RestartOnFailure><Interval>PT1M</Interval><Count>999</Count></RestartOnFailure>
  </Settings>
  <Actions Context="Author">
    <Exec>
      <Command>$INSTDIR\\python\\pythonw.exe</Command>
      <Arguments>-m agent "@$Data\\{DATA_LAYOUT["args"]}"</Arguments>
      <WorkingDirectory>$INSTDIR</WorkingDirectory>
    </Exec>
  </Actions>
</Task>
"""
"""The log-on task (Task Scheduler schema 1.2). Why each setting: no ``ExecutionTimeLimit``
(the default stops it after 72 h), on battery (a laptop on a ward trolley), the logon
trigger repeated every :data:`RESTART_EVERY` with ``IgnoreNew`` (``RestartOnFailure`` only
covers a start that fails, not a process that crashes later), the person's interactive
session with their rights (a service's session 0 sees no desktop: docs/windows-agent.md)."""


def nsis_script(source: Path, out: Path, compress: bool = True) -> str:
    """The NSIS script installing the folder ``source`` into ``out``'s setup program
    (``compress``: LZMA, a third of the size; off, the tests' throwaway ones build faster)."""
    task = "\n".join("  FileWriteUTF16LE $0 '" + line.replace("'", "$\\'") + "$\\r$\\n'"
                     for line in TASK_XML.splitlines())
    names = {"@OUT@": str(out), "@SOURCE@": str(source), "@TASK@": TASK_NAME,
             "@TASK_XML@": task, "@AGENT@": DATA_LAYOUT["agent"],
             "@KEYS@": DATA_LAYOUT["keys"], "@ARGS@": DATA_LAYOUT["args"],
             "@CONFIG@": DATA_LAYOUT["config"], "@TASKXML@": DATA_LAYOUT["task"],
             "@LOG@": DATA_LAYOUT["log"],
             "@COMPRESSION@": "SetCompressor /SOLID lzma" if compress else "SetCompress off"}
    script = NSIS
    for name, value in names.items():
        script = script.replace(name, value)
    return script


def build_setup(source: Path, out: Path, compress: bool = True) -> Path:
    """``out``: the setup program of the agent folder ``source`` (makensis, Debian's nsis)."""
    makensis = shutil.which("makensis")
    if makensis is None:
        raise InstallerError("makensis not found: install the Debian package nsis")
    script = out.with_suffix(".nsi")
    script.write_text(nsis_script(source.resolve(), out.resolve(), compress), encoding="utf-8-sig")
    done = subprocess.run([makensis, "-V2", "-INPUTCHARSET", "UTF8", str(script)],
                          capture_output=True, text=True, check=False)
    script.unlink()
    if done.returncode != 0:
        raise InstallerError(f"makensis failed ({done.returncode}):"
                             f" {(done.stdout + done.stderr).strip()[-3000:]}")
    return out
